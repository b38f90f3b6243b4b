// Run Locus's own parser, parseCliStreamEvent from @locusai/shared, on every NDJSON line of stdin.
// Prints one JSON report on stdout: {"lines": n, "accepted": n, "rejected": [{"line", "type", "problem"}]}.
//
// The published package (0.20.x) declares "type": "module" and a "main" that points at TypeScript
// sources it does not ship; its real entry, dist/index.js, is a CommonJS bundle. So the bundle is
// loaded here as CommonJS explicitly, with a require() rooted at the package so it finds zod.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import vm from "node:vm";

function loadLocusShared() {
  const packageDir = dirname(createRequire(import.meta.url).resolve("@locusai/shared/package.json"));
  const file = join(packageDir, "dist", "index.js");
  const run = vm.compileFunction(readFileSync(file, "utf8"), ["exports", "require", "module", "__filename", "__dirname"], {
    filename: file,
  });
  const module = { exports: {} };
  run(module.exports, createRequire(file), module, file, dirname(file));
  return module.exports;
}

const { parseCliStreamEvent } = loadLocusShared();
const lines = readFileSync(0, "utf8").split("\n").filter((text) => text.trim() !== "");
const rejected = [];
lines.forEach((text, index) => {
  let value;
  try {
    value = JSON.parse(text);
  } catch (error) {
    rejected.push({ line: index + 1, type: null, problem: `not JSON: ${error.message}` });
    return;
  }
  const parsed = parseCliStreamEvent(value);
  if (!parsed.success) {
    const problem = parsed.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`).join("; ");
    rejected.push({ line: index + 1, type: value?.type ?? null, problem });
  }
});
process.stdout.write(JSON.stringify({ lines: lines.length, accepted: lines.length - rejected.length, rejected }) + "\n");
