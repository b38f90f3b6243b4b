// A small Markdown renderer that builds DOM nodes and never parses HTML.
//
// Run content (model output, tool output) is untrusted: every piece of it reaches the
// page through document.createTextNode / textContent, so "<script>" shows as text.
// Supported: headings, paragraphs, fenced and indented code, block quotes, bullet and
// numbered lists, horizontal rules, **bold**, *italic* / _italic_, `code`, ~~strike~~
// and [links](http://…) (http, https and mailto only; anything else stays plain text).
"use strict";

const Markdown = (() => {
  const SAFE_LINK = /^(https?:|mailto:)/i;

  function el(tag, className) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    return node;
  }

  // Inline spans: a small scanner over the text, each match turned into an element.
  const INLINE = [
    { re: /`([^`]+)`/, make: (m) => textEl("code", m[1]) },
    { re: /\*\*([^*]+)\*\*/, make: (m) => spanEl("strong", m[1]) },
    { re: /__([^_]+)__/, make: (m) => spanEl("strong", m[1]) },
    { re: /~~([^~]+)~~/, make: (m) => spanEl("del", m[1]) },
    { re: /\*([^*\s][^*]*)\*/, make: (m) => spanEl("em", m[1]) },
    { re: /(?:^|(?<=\W))_([^_\s][^_]*)_(?=\W|$)/, make: (m) => spanEl("em", m[1]) },
    { re: /\[([^\]]+)\]\(([^)\s]+)\)/, make: linkEl },
  ];

  function textEl(tag, text) {
    const node = el(tag);
    node.textContent = text;
    return node;
  }

  function spanEl(tag, text) {
    const node = el(tag);
    appendInline(node, text);
    return node;
  }

  function linkEl(m) {
    const href = m[2];
    if (!SAFE_LINK.test(href)) return document.createTextNode(m[0]);
    const a = el("a");
    a.href = href;
    a.rel = "noopener noreferrer nofollow";
    a.target = "_blank";
    appendInline(a, m[1]);
    return a;
  }

  function appendInline(parent, text) {
    while (text) {
      let best = null;
      for (const rule of INLINE) {
        const m = rule.re.exec(text);
        if (m && (best === null || m.index < best.m.index)) best = { m, rule };
      }
      if (best === null) {
        parent.appendChild(document.createTextNode(text));
        return;
      }
      if (best.m.index > 0) parent.appendChild(document.createTextNode(text.slice(0, best.m.index)));
      parent.appendChild(best.rule.make(best.m));
      text = text.slice(best.m.index + best.m[0].length);
    }
  }

  const FENCE = /^\s{0,3}(```|~~~)\s*([\w+-]*)\s*$/;
  const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
  const BULLET = /^\s{0,3}[-*+]\s+(.*)$/;
  const NUMBERED = /^\s{0,3}(\d{1,9})[.)]\s+(.*)$/;
  const QUOTE = /^\s{0,3}>\s?(.*)$/;
  const INDENTED = /^( {4}|\t)(.*)$/;

  // Block structure, line by line; returns a DocumentFragment.
  function render(source) {
    const out = document.createDocumentFragment();
    const lines = String(source).replace(/\r\n?/g, "\n").split("\n");
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (!line.trim()) {
        i++;
      } else if ((m = FENCE.exec(line))) {
        const body = [];
        i++;
        while (i < lines.length && !(FENCE.exec(lines[i]) && lines[i].trim().startsWith(m[1]))) body.push(lines[i++]);
        i++;
        out.appendChild(codeBlock(body.join("\n"), m[2]));
      } else if ((m = HEADING.exec(line))) {
        const h = el("h" + Math.min(m[1].length + 2, 6));
        appendInline(h, m[2]);
        out.appendChild(h);
        i++;
      } else if (RULE.test(line)) {
        out.appendChild(el("hr"));
        i++;
      } else if (QUOTE.test(line)) {
        const body = [];
        while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
          body.push(m[1]);
          i++;
        }
        const quote = el("blockquote");
        quote.appendChild(render(body.join("\n")));
        out.appendChild(quote);
      } else if (BULLET.test(line) || NUMBERED.test(line)) {
        i = list(lines, i, out);
      } else if (INDENTED.test(line)) {
        const body = [];
        while (i < lines.length && ((m = INDENTED.exec(lines[i])) || !lines[i].trim())) {
          body.push(m ? m[2] : "");
          i++;
        }
        out.appendChild(codeBlock(body.join("\n").replace(/\n+$/, ""), ""));
      } else {
        const body = [];
        while (i < lines.length && lines[i].trim() && !startsBlock(lines[i])) body.push(lines[i++].trim());
        const p = el("p");
        body.forEach((text, n) => {
          if (n > 0) p.appendChild(document.createTextNode("\n"));
          appendInline(p, text);
        });
        out.appendChild(p);
      }
    }
    return out;
  }

  function startsBlock(line) {
    return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) ||
      BULLET.test(line) || NUMBERED.test(line);
  }

  function list(lines, i, out) {
    const numbered = NUMBERED.test(lines[i]);
    const node = el(numbered ? "ol" : "ul");
    if (numbered) node.start = Number(NUMBERED.exec(lines[i])[1]);
    const pattern = numbered ? NUMBERED : BULLET;
    while (i < lines.length) {
      const m = pattern.exec(lines[i]);
      if (!m) break;
      const item = el("li");
      appendInline(item, numbered ? m[2] : m[1]);
      i++;
      while (i < lines.length && /^\s{2,}\S/.test(lines[i]) && !pattern.test(lines[i])) {
        item.appendChild(document.createTextNode(" "));
        appendInline(item, lines[i++].trim());
      }
      node.appendChild(item);
    }
    out.appendChild(node);
    return i;
  }

  function codeBlock(text, language) {
    const pre = el("pre", "code");
    const code = el("code");
    if (language) code.dataset.language = language;
    code.textContent = text;
    pre.appendChild(code);
    return pre;
  }

  return { render };
})();
