/**
 * Which native addon this process runs on: the CPU build (../native/native.cjs, napi's loader of
 * the platform package) or the CUDA build (wick.linux-x64-gnu-cuda.node beside it, or the
 * optional package wick-linux-x64-gnu-cuda). The only module that loads an addon.
 *
 * The CUDA addon links libcuda, which only the NVIDIA driver provides: without a driver, loading
 * it fails, and a broken driver may take the process down. So before the CUDA addon is loaded
 * in-process, a child process loads it and asks `probeDevice(device)`; only when that answers
 * with a `cuda:*` device does this process load it. Anything else (a load error, no device, a
 * crash, no answer) picks the CPU addon, with one line saying why (`AddonChoice.notice`).
 *
 * The choice is made once, by the first `selectAddon` (`wick serve` makes it at start from
 * --device / -ngl) or else on the first use of the addon, from WICK_DEVICE.
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import type * as Native from "../native/native.d.ts";

export type NativeAddon = typeof Native;

/** The devices `--device` and WICK_DEVICE take (the engine's `DeviceChoice`). */
export const DEVICES = ["auto", "cpu", "cuda", "cuda:N", "metal", "cpu-candle"] as const;

/** Whether `s` names a device the engine accepts (`cuda:N` with N a device number). */
export const isDevice = (s: string): boolean => /^(auto|cpu|cuda|cuda:\d+|metal|cpu-candle)$/.test(s);

export interface AddonChoice {
  kind: "cpu" | "cuda";
  /** The device asked for (`auto` when none was). */
  device: string;
  /** The CUDA addon that was considered, when one is installed. */
  cudaAddon?: string;
  /**
   * Why the CPU addon runs although the device asked for could be a GPU (one line, ending in
   * "running on the CPU"): the CUDA addon is installed but did not find a CUDA device.
   */
  notice?: string;
}

export interface SelectOptions {
  /** `--device`; WICK_DEVICE when absent, else `auto`. */
  device?: string;
  /** `-ngl`: 0 keeps the model on the CPU, so the CUDA addon is not tried. */
  gpuLayers?: number;
}

const require = createRequire(import.meta.url);
const CUDA_FILE = "wick.linux-x64-gnu-cuda.node";
const CUDA_PACKAGE = "wick-linux-x64-gnu-cuda";
/** How long the probe child may take: loading the CUDA libraries and creating a context. */
const PROBE_TIMEOUT_MS = 60_000;

let chosen: { choice: AddonChoice; addon: NativeAddon } | undefined;

/**
 * Decides which addon this process runs on (once: later calls return the first choice). A bad
 * device name is not judged here: the engine rejects it when a model loads.
 */
export function selectAddon(opts: SelectOptions = {}): AddonChoice {
  if (chosen) return chosen.choice;
  const device = opts.device ?? (process.env.WICK_DEVICE || "auto");
  const cudaAddon = findCudaAddon();
  const wantsGpu = opts.gpuLayers !== 0 && isDevice(device) && (device === "auto" || device.startsWith("cuda"));
  if (cudaAddon && wantsGpu) {
    // Loading the CUDA addon in a child takes ~70 ms of every start: not where no driver is there to find.
    const probe = nvidiaDriverSeen() ? probeCudaAddon(cudaAddon, device) : { notice: `no CUDA driver (none of ${DRIVER_FILES.join(", ")}); running on the CPU` };
    if (probe.device?.startsWith("cuda")) {
      chosen = { choice: { kind: "cuda", device, cudaAddon }, addon: require(cudaAddon) as NativeAddon };
      return chosen.choice;
    }
    chosen = { choice: { kind: "cpu", device, cudaAddon, notice: probe.notice }, addon: cpuAddon() };
    return chosen.choice;
  }
  chosen = { choice: { kind: "cpu", device, ...(cudaAddon ? { cudaAddon } : {}) }, addon: cpuAddon() };
  return chosen.choice;
}

/** The addon this process runs on (chosen now, from WICK_DEVICE, if nothing chose it yet). */
export function native(): NativeAddon {
  if (!chosen) selectAddon();
  return chosen!.addon;
}

/** The choice made, if one was. */
export const addonChoice = (): AddonChoice | undefined => chosen?.choice;

const cpuAddon = () => require("../native/native.cjs") as NativeAddon;

/**
 * The CUDA addon's path, when one is installed: WICK_CUDA_ADDON, else a local build beside the
 * CPU addon (scripts/build-cuda.sh), else the optional npm package. Linux x86-64 only.
 */
export function findCudaAddon(): string | undefined {
  const explicit = process.env.WICK_CUDA_ADDON;
  if (explicit) return existsSync(explicit) ? path.resolve(explicit) : undefined;
  if (process.platform !== "linux" || process.arch !== "x64") return undefined;
  const local = path.join(import.meta.dirname, "../native", CUDA_FILE);
  if (existsSync(local)) return local;
  try {
    return require.resolve(CUDA_PACKAGE);
  } catch {
    return undefined;
  }
}

/** Files an NVIDIA driver makes (Linux; /dev/dxg under WSL 2): without any, libcuda has no GPU to open. */
const DRIVER_FILES = ["/proc/driver/nvidia", "/dev/nvidiactl", "/dev/dxg"];

/** Whether this machine shows an NVIDIA driver (WICK_CUDA_PROBE=always probes regardless). */
export function nvidiaDriverSeen(): boolean {
  return process.env.WICK_CUDA_PROBE === "always" || DRIVER_FILES.some((f) => existsSync(f));
}

export interface Probe {
  /** The device the addon would place a model on (`cuda:0`, `cpu`), when the child answered. */
  device?: string;
  /** Why that is not a CUDA device, as one line ending in "running on the CPU". */
  notice?: string;
}

/** The child: load the addon, ask it, print the answer as JSON on stdout. */
const PROBE_SCRIPT = `
const addon = require(process.env.WICK_PROBE_ADDON);
const p = addon.probeDevice(process.env.WICK_PROBE_DEVICE);
process.stdout.write(JSON.stringify(p));
`;

/**
 * Asks a child process where `addon` would place a model for `device`. Never throws: a child
 * that fails to load the addon, crashes or hangs is a notice.
 */
export function probeCudaAddon(addon: string, device: string): Probe {
  const r = spawnSync(process.execPath, ["-e", PROBE_SCRIPT], {
    env: { ...process.env, WICK_PROBE_ADDON: addon, WICK_PROBE_DEVICE: device },
    encoding: "utf8",
    timeout: PROBE_TIMEOUT_MS,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const cpu = (why: string): Probe => ({ notice: `${why}; running on the CPU` });
  if (r.error && (r.error as NodeJS.ErrnoException).code === "ETIMEDOUT") return cpu(`the CUDA probe did not answer in ${PROBE_TIMEOUT_MS / 1000} s`);
  if (r.error) return cpu(`the CUDA probe did not start (${r.error.message})`);
  if (r.signal) return cpu(`the CUDA probe crashed (${r.signal})`);
  if (r.status === 0) {
    try {
      const p = JSON.parse(r.stdout) as { device?: unknown; notice?: unknown };
      if (typeof p.device === "string") {
        if (p.device.startsWith("cuda")) return { device: p.device };
        return { device: p.device, notice: typeof p.notice === "string" ? p.notice : `no CUDA device (the CUDA addon chose ${p.device}); running on the CPU` };
      }
    } catch {
      // Reported below.
    }
    return cpu(`the CUDA probe answered ${JSON.stringify(r.stdout.slice(0, 200))}`);
  }
  const why = errorLine(r.stderr) ?? `exit ${r.status}`;
  return cpu(/libcuda\b/.test(why) ? `no CUDA driver (${why})` : `the CUDA addon did not load (${why})`);
}

/** The message of the error a failed `node -e` printed (its `Error: …` line), shortened. */
function errorLine(stderr: string): string | undefined {
  const line = stderr.split("\n").find((l) => /^\w*Error\b.*?: /.test(l));
  const msg = line?.replace(/^\w*Error\b.*?: /, "").trim();
  if (!msg) return undefined;
  // dlopen's "…/wick.linux-x64-gnu-cuda.node: libcuda.so.1: cannot open…": the library is the news.
  const dl = /([\w.+-]+\.so[\w.]*: cannot open shared object file)/.exec(msg);
  return (dl ? dl[1] : msg).slice(0, 300);
}
