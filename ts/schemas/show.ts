/** POST /api/show body (Ollama). `name` is the legacy spelling of `model`; either may be empty. */
import { z } from "zod";

export const showRequest = z.object({
  model: z.string().nullish(),
  name: z.string().nullish(),
  /** Full tokenizer arrays in `model_info` (otherwise arrays over 5 entries come back empty). */
  verbose: z.boolean().nullish(),
});
export type ShowRequest = z.infer<typeof showRequest>;
