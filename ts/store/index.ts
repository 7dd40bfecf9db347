/**
 * The model store's public surface, for the server routes and the CLI: names and references,
 * the on-disk store, the hub client, Modelfiles and `create`, and TEMPLATE rendering.
 */
export { StoreError, type StoreErrorCode } from "./errors.ts";
export {
  DEFAULT_NAMESPACE,
  OLLAMA_REGISTRY_HOST,
  DEFAULT_TAG,
  HUB_HOST,
  formatName,
  looksLikePath,
  nameKey,
  parseModelName,
  parseReference,
  type HubRef,
  type ModelName,
  type ModelReference,
} from "./reference.ts";
export { ModelStore, defaultHome, type StoreOptions } from "./store.ts";
export type { BlobRef, ListedModel, Located, ResolvedModel, StoredManifest } from "./store-types.ts";
export { MEDIA, type Layer, type Manifest, type ModelConfig } from "./manifest.ts";
export { HubClient, type HubOptions, type ProgressFn, type PullProgress, type PullResult } from "./hub.ts";
export { DEFAULT_QUANT, pickFiles, quantOf, type HubChoice, type HubFile } from "./hub-files.ts";
export { formatParameters, parseModelfile, parseParameters, renderModelfile, type Modelfile, type ModelfileMessage } from "./modelfile.ts";
export { checkAdapter, createModel, type CreateOptions, type CreateResult } from "./create.ts";
export { GoTemplate, renderGoTemplate } from "./go-template.ts";
export { collate, renderOllamaPrompt, type PromptMessage, type PromptValues } from "./ollama-template.ts";
export { humanCount, readGgufHeader, type GgufHeader } from "./gguf-header.ts";
