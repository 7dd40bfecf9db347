/**
 * llama-server (built from the bundled llama.cpp by scripts/build-llama-server.sh) as a child
 * process on a loopback port, for parity tests: started with the given arguments, ready once
 * /health answers 200, killed after the file's tests.
 */
import { spawn, type ChildProcess } from "node:child_process";
import path from "node:path";
import { localFile, repoRoot, type Asset } from "./assets.ts";
import { freePort } from "./server.ts";

/** The llama-server binary: `$WICK_LLAMA_BUILD/bin` (the script's build dir), default .cache/llama-build. */
export function llamaServerBin(): Asset {
  const dir = process.env.WICK_LLAMA_BUILD ?? path.join(repoRoot, ".cache/llama-build");
  return localFile(path.join(dir, "bin/llama-server"), "build it with: bash scripts/build-llama-server.sh");
}

export interface LlamaServer {
  url: string;
  stop(): void;
}

export async function startLlamaServer(bin: string, args: string[], timeoutMs = 120_000): Promise<LlamaServer> {
  const port = await freePort();
  const child: ChildProcess = spawn(bin, [...args, "--host", "127.0.0.1", "--port", String(port)], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  child.stderr!.on("data", (d: Buffer) => (log = (log + d.toString()).slice(-4000)));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`llama-server exited (${child.exitCode}): ${log}`);
    try {
      if ((await fetch(`${url}/health`)).status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`llama-server did not become ready: ${log}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { url, stop: () => child.kill("SIGKILL") };
}
