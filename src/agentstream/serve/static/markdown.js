// A small Markdown renderer that builds DOM nodes and never parses HTML.
//
// Run content (model output, tool output) is untrusted: every piece of it reaches the
// page through document.createTextNode / textContent, so "<script>" shows as text.
// Supported: headings, paragraphs, fenced and indented code, block quotes, bullet and
// numbered lists, horizontal rules, **bold**, *italic* / _italic_, `code`, ~~strike~~
// and [links](http://…) (http, https and mailto only; anything else stays plain text).
"use strict";

// Run text as the page shows it. Characters that would change how the text around them looks,
// or show as nothing, are named instead: a bidi override or isolate (U+202A–U+202E,
// U+2066–U+2069) would show "rm -rf ~ #\u202Etxt.elif" as ending in "file.txt", so it shows as
// ⟨U+202E⟩, and so do control characters but tab and line breaks (⟨U+0007⟩). The terminal
// codes a tool prints for colour and cursor moves (ESC [ … m) are dropped.
const ANSI_CSI = /\x1b\[[0-?]*[ -/]*[@-~]/g;
const INVISIBLE = /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u202a-\u202e\u2066-\u2069]/g;

function visibleText(text) {
  return String(text)
    .replace(ANSI_CSI, "")
    .replace(INVISIBLE, (char) => `⟨U+${char.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0")}⟩`);
}

const Markdown = (() => {
  const SAFE_LINK = /^(https?:|mailto:)/i;

  function el(tag, className) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    return node;
  }

  // Inline spans. Each rule's `make` gets the rule's own capture groups and the whole match.
  const RULES = [
    { re: /`([^`]+)`/, make: (g) => textEl("code", g[0]) },
    { re: /\*\*([^*]+)\*\*/, make: (g) => spanEl("strong", g[0]) },
    // Underscores open only at the start of the text, right after another span or after a
    // non-word character (appendInline checks that, since a lookbehind cannot see span
    // boundaries), and close only before one: "window.__a=1; window.__b" has no bold in it.
    { re: /__([^_\s][^_]*)__(?=\W|$)/, make: (g) => spanEl("strong", g[0]), wordStart: true },
    { re: /~~([^~]+)~~/, make: (g) => spanEl("del", g[0]) },
    { re: /\*([^*\s][^*]*)\*/, make: (g) => spanEl("em", g[0]) },
    { re: /_([^_\s][^_]*)_(?=\W|$)/, make: (g) => spanEl("em", g[0]), wordStart: true },
    // The label stops at a "[" and the address at a "](", so a failed try never scans past
    // the next link's start (else "[[[[…" is quadratic). "]" alone may be in it: http://[::1]/.
    { re: /\[([^[\]]+)\]\(((?:[^)\s\]]|\](?!\())+)\)/, make: (g, whole) => linkEl(g[0], g[1], whole) },
  ];
  // All rules as one alternation, so a single left-to-right scan finds the earliest span
  // (ties go to the earlier rule): linear in the text, where re-running every rule on the
  // rest of the line after each span was quadratic.
  const INLINE = new RegExp(RULES.map((rule) => rule.re.source).join("|"), "g");
  let group = 1;
  for (const rule of RULES) {
    rule.group = group; // index of the rule's first capture group in INLINE's matches
    rule.groups = new RegExp(`${rule.re.source}|`).exec("").length - 1; // its group count
    group += rule.groups;
  }

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

  function linkEl(label, href, whole) {
    if (!SAFE_LINK.test(href)) return document.createTextNode(whole);
    const a = el("a");
    a.href = href;
    a.rel = "noopener noreferrer nofollow";
    a.target = "_blank";
    appendInline(a, label);
    return a;
  }

  function appendInline(parent, text) {
    let done = 0; // text before this is on the page
    let from = 0; // where the scan goes on
    for (;;) {
      INLINE.lastIndex = from; // set before every exec: make() recurses with the same regex
      const m = INLINE.exec(text);
      if (m === null) break;
      const rule = RULES.find((r) => m[r.group] !== undefined);
      if (rule.wordStart && m.index > done && /\w/.test(text[m.index - 1])) {
        from = m.index + 1; // not a span here; look further on
        continue;
      }
      if (m.index > done) parent.appendChild(document.createTextNode(text.slice(done, m.index)));
      parent.appendChild(rule.make(m.slice(rule.group, rule.group + rule.groups), m[0]));
      done = from = m.index + m[0].length;
    }
    if (done < text.length) parent.appendChild(document.createTextNode(text.slice(done)));
  }

  const FENCE = /^\s{0,3}(```|~~~)\s*([\w+-]*)\s*$/;
  const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
  const BULLET = /^\s{0,3}[-*+]\s+(.*)$/;
  const NUMBERED = /^\s{0,3}(\d{1,9})[.)]\s+(.*)$/;
  const QUOTE = /^\s{0,3}>\s?(.*)$/;
  const INDENTED = /^( {4}|\t)(.*)$/;
  // Quotes nest by recursion; deeper than this the rest is shown as plain text, so a
  // message of thousands of ">" cannot overflow the stack.
  const MAX_QUOTE_DEPTH = 20;

  // Block structure, line by line; returns a DocumentFragment.
  function render(source, depth = 0) {
    const out = document.createDocumentFragment();
    const lines = visibleText(source).replace(/\r\n?/g, "\n").split("\n");
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
        if (depth < MAX_QUOTE_DEPTH) quote.appendChild(render(body.join("\n"), depth + 1));
        else quote.appendChild(textEl("p", body.join("\n")));
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
