/**
 * Ollama's manifest: a Docker distribution v2 manifest whose layers are the model's parts
 * (manifest/manifest.go). Parsed with zod because manifests come from disk and may have been
 * written by hand or by a crashed older version.
 */
import { z } from "zod";

export const MANIFEST_MEDIA_TYPE = "application/vnd.docker.distribution.manifest.v2+json";
export const CONFIG_MEDIA_TYPE = "application/vnd.docker.container.image.v1+json";

export const MEDIA = {
  model: "application/vnd.ollama.image.model",
  projector: "application/vnd.ollama.image.projector",
  adapter: "application/vnd.ollama.image.adapter",
  template: "application/vnd.ollama.image.template",
  system: "application/vnd.ollama.image.system",
  params: "application/vnd.ollama.image.params",
  messages: "application/vnd.ollama.image.messages",
  license: "application/vnd.ollama.image.license",
} as const;

export const DIGEST_RE = /^sha256:[0-9a-f]{64}$/;

const layerSchema = z.object({
  mediaType: z.string().min(1),
  digest: z.string().regex(DIGEST_RE, "digest must be sha256:<64 lowercase hex>"),
  size: z.number().int().min(0),
  from: z.string().optional(),
  name: z.string().optional(),
});

export const manifestSchema = z.object({
  schemaVersion: z.literal(2),
  mediaType: z.string(),
  config: layerSchema,
  layers: z.array(layerSchema),
});

export type Layer = z.infer<typeof layerSchema>;
export type Manifest = z.infer<typeof manifestSchema>;

/** What the config blob holds (Ollama's ConfigV2, the fields /api/tags `details` read). */
export interface ModelConfig {
  model_format: "gguf";
  model_family: string;
  model_families: string[];
  model_type: string;
  file_type: string;
  architecture: string;
  os: string;
  rootfs: { type: "layers"; diff_ids: string[] };
}

export function buildManifest(config: Layer, layers: Layer[]): Manifest {
  return { schemaVersion: 2, mediaType: MANIFEST_MEDIA_TYPE, config, layers };
}

/** sha256:<hex> → the blob's file name, sha256-<hex>. */
export const blobFileName = (digest: string) => digest.replace(":", "-");
