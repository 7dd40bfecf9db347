/**
 * Bundles the `wick` command (ts/cli/main.ts and everything it imports, npm dependencies
 * included) into one CommonJS file, dist/cli/bundle.cjs, which bin/wick.js runs: Node loading one module
 * instead of a few hundred is most of the JavaScript part of `wick serve`'s start-up. Left out:
 * sharp (native; imported on the first image) and the napi loader dist/native/native.cjs (required
 * beside it at run time). The bundle sits at the depth of the modules it replaces (dist/cli/), so
 * their `import.meta.url`-relative paths still hold (ts/server/package-files.ts). dist/ keeps the
 * unbundled modules too: the library entry (dist/lib.js) and its types.
 *
 * Usage: tsx scripts/build-bundle.ts [dist-dir]   (part of `npm run build:ts`)
 */
import path from "node:path";
import { build } from "esbuild";

const root = path.resolve(import.meta.dirname, "..");

export async function buildBundle(dist = path.join(root, "dist")): Promise<string> {
  const outfile = path.join(dist, "cli", "bundle.cjs");
  await build({
    entryPoints: [path.join(root, "ts", "cli", "main.ts")],
    bundle: true,
    platform: "node",
    // A script, not a module: bin/wick.js compiles it with V8's code cache (Node 20 has none for modules).
    format: "cjs",
    target: "node20",
    outfile,
    external: ["sharp", "../native/native.cjs"],
    // The modules' `import.meta` paths, as they were beside their own files under dist/cli.
    define: { "import.meta.url": "__wickMetaUrl", "import.meta.dirname": "__dirname", "import.meta.filename": "__filename" },
    banner: { js: 'const __wickMetaUrl = require("node:url").pathToFileURL(__filename).href;' },
    legalComments: "none",
    logLevel: "warning",
  });
  return outfile;
}

if (import.meta.filename === process.argv[1]) console.log(await buildBundle(process.argv[2] ? path.resolve(process.argv[2]) : undefined));
