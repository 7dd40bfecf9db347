/** `wick serve`'s vision flags parse into what serve.ts reads (commander names `--no-` flags by what they negate). */
import { fileURLToPath } from "node:url";
import test from "ava";
import type { ServeFlags } from "../ts/cli/flags.ts";
import { runCli, type Commands } from "../ts/cli/program.ts";

async function serveFlags(argv: string[]): Promise<ServeFlags> {
  let got: ServeFlags | undefined;
  // Only `serve` runs here.
  const commands = { serve: async (f: ServeFlags) => void (got = f) } as unknown as Commands;
  // -m must name an existing file (or a store name): this test file stands in.
  await runCli(["serve", "-m", fileURLToPath(import.meta.url), ...argv], commands);
  return got!;
}

test("--mmproj / -mm, the image token bounds, the fetch limits and --no-private-image-urls", async (t) => {
  const f = await serveFlags([
    "-mm",
    "proj.gguf",
    "--image-min-tokens",
    "32",
    "--image-max-tokens",
    "64",
    "--no-private-image-urls",
    "--image-max-pixels",
    "1000000",
    "--image-max-bytes",
    "2048",
    "--image-timeout",
    "500",
  ]);
  t.like(f, { mmproj: "proj.gguf", imageMinTokens: 32, imageMaxTokens: 64, privateImageUrls: false, imageMaxPixels: 1_000_000, imageMaxBytes: 2048, imageTimeout: 500 });
  t.not((await serveFlags(["--mmproj", "p.gguf"])).privateImageUrls, false, "private URLs are allowed unless the flag is given");
});
