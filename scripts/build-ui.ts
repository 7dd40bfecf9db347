/**
 * Builds the chat page (ui/) into one self-contained file, ui/build/index.html: ui/main.ts
 * bundled and minified by esbuild, ui/style.css minified, both inlined into ui/index.html with
 * a Content-Security-Policy that allows exactly those two (by hash), images from data:/blob:
 * URLs and requests to the page's own origin — nothing else, so the page cannot reach any other
 * host. One file because the server answers it on `/`, the one path open without the API key.
 * Prints the sizes. Run by `npm run build:ui` (part of build:ts) and by test/ui.test.ts.
 */
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { gzipSync } from "node:zlib";
import { build, transform } from "esbuild";

const root = path.resolve(import.meta.dirname, "..");
const ui = path.join(root, "ui");
export const PAGE = path.join(ui, "build", "index.html");

export async function buildUi(): Promise<{ path: string; bytes: number; gzip: number; js: number; css: number }> {
  const js = await build({ entryPoints: [path.join(ui, "main.ts")], bundle: true, minify: true, format: "esm", target: "es2022", write: false, legalComments: "none" });
  const script = js.outputFiles[0].text.trim().replace(/<\/(script)/gi, "<\\/$1");
  const css = (await transform(readFileSync(path.join(ui, "style.css"), "utf8"), { loader: "css", minify: true })).code.trim();
  const sha = (s: string) => `'sha256-${createHash("sha256").update(s, "utf8").digest("base64")}'`;
  const csp = ["default-src 'none'", `script-src ${sha(script)}`, `style-src ${sha(css)}`, "img-src data: blob:", "connect-src 'self'", "base-uri 'none'", "form-action 'none'"].join("; ");
  // The markup's indentation goes; the script and style are inserted as hashed, byte for byte.
  const template = readFileSync(path.join(ui, "index.html"), "utf8").replace(/\n\s*/g, "\n");
  const parts = template.split(/<style>\s*\/\*STYLE\*\/\s*<\/style>|<script type="module">\s*\/\*SCRIPT\*\/\s*<\/script>/);
  if (parts.length !== 3) throw new Error("ui/index.html must hold one /*STYLE*/ and one /*SCRIPT*/ placeholder");
  const html = (parts[0] + `<style>${css}</style>` + parts[1] + `<script type="module">${script}</script>` + parts[2]).replace(
    "<!--CSP-->",
    `<meta http-equiv="Content-Security-Policy" content="${csp}" />`,
  );
  mkdirSync(path.dirname(PAGE), { recursive: true });
  writeFileSync(PAGE, html);
  return { path: PAGE, bytes: Buffer.byteLength(html), gzip: gzipSync(html).length, js: Buffer.byteLength(script), css: Buffer.byteLength(css) };
}

if (process.argv[1] && path.resolve(process.argv[1]) === import.meta.filename) {
  const r = await buildUi();
  console.log(`${path.relative(root, r.path)}: ${r.bytes} bytes (${r.gzip} gzipped; script ${r.js}, style ${r.css})`);
}
