/**
 * The config blob every manifest points at (Ollama's ConfigV2): the GGUF's architecture, file
 * type and parameter count, which /api/tags and /api/show report as `details` without
 * opening the model.
 */
import { readGgufHeader, humanCount } from "./gguf-header.ts";
import { CONFIG_MEDIA_TYPE, buildManifest, type Layer, type Manifest, type ModelConfig } from "./manifest.ts";
import type { ModelStore } from "./store.ts";

export async function modelConfig(ggufFile: string, layers: Layer[]): Promise<ModelConfig> {
  const h = await readGgufHeader(ggufFile);
  return {
    model_format: "gguf",
    model_family: h.architecture,
    model_families: [h.architecture],
    model_type: humanCount(h.parameterCount),
    file_type: h.fileType,
    architecture: process.arch === "x64" ? "amd64" : process.arch,
    os: process.platform,
    rootfs: { type: "layers", diff_ids: layers.map((l) => l.digest) },
  };
}

/** Writes the config blob for `layers` (the first model layer's GGUF header) and returns the manifest. */
export async function manifestFor(store: ModelStore, modelFile: string, layers: Layer[]): Promise<Manifest> {
  const config = await modelConfig(modelFile, layers);
  const blob = await store.importBytes(JSON.stringify(config));
  return buildManifest({ mediaType: CONFIG_MEDIA_TYPE, ...blob }, layers);
}
