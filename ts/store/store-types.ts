/** The shapes the store hands out (store.ts). */
import type { HubRef, ModelName } from "./reference.ts";
import type { Manifest, ModelConfig } from "./manifest.ts";

export interface StoredManifest {
  name: ModelName;
  manifest: Manifest;
  /** sha256:<hex> of the manifest bytes: Ollama's model digest (`ollama list` ID = its first 12 hex). */
  digest: string;
  file: string;
  modifiedAt: Date;
}

export interface ListedModel {
  /** Display name, e.g. `llama3:latest`, `hf.co/org/repo:Q4_K_M`. */
  name: string;
  modelName: ModelName;
  /** Manifest digest, 64 hex (what /api/tags calls `digest`). */
  digest: string;
  /** Sum of the layers' sizes. */
  size: number;
  modifiedAt: Date;
  config?: ModelConfig;
  /** Set when a layer's blob is missing or has the wrong size: the model cannot load. */
  problem?: string;
}

/** A store model resolved to what the engine and the service need. */
export interface ResolvedModel {
  name: string;
  modelName: ModelName;
  digest: string;
  modelPath: string;
  projectorPath?: string;
  /** LoRA adapters baked in (Modelfile ADAPTER, /api/create `adapters`), loaded with the model at scale 1. */
  adapterPaths: string[];
  template?: string;
  system?: string;
  license?: string[];
  /** Modelfile PARAMETERs (Ollama option names; `stop` an array). */
  params: Record<string, unknown>;
  messages: { role: string; content: string }[];
  config?: ModelConfig;
  manifest: Manifest;
  size: number;
  modifiedAt: Date;
}

/** Where a reference points once the store has been asked (see reference.ts on `org/repo`). */
export type Located = { kind: "path"; path: string } | { kind: "store"; name: ModelName } | { kind: "hub"; name: ModelName; hub: HubRef };

export type BlobSource = string | AsyncIterable<Uint8Array>;

/** A blob in the store: its digest (sha256:<hex>) and size. */
export interface BlobRef {
  digest: string;
  size: number;
}
