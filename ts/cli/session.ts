/**
 * A `wick run` chat session: the model, the server it is asked of, and the options and history
 * of its turns; shared by the one-shot run (run.ts) and the interactive chat (repl.ts).
 */
import type { ChatMessage } from "./chat.ts";
import type { WickClient } from "./client.ts";
import { ApiError, CliError } from "./errors.ts";
import { isHubRef, pullModel } from "./models.ts";
import type { ShowAnswer } from "./show.ts";

export interface Session {
  client: WickClient;
  model: string;
  info: ShowAnswer;
  /** Request options set by flags and /set parameter. */
  options: Record<string, unknown>;
  system?: string;
  format?: string;
  keepAlive?: string;
  verbose: boolean;
  messages: ChatMessage[];
  /** Image paths waiting for the next message (--image, /image without a question). */
  images: string[];
}

/** The model's /api/show answer; a hub reference the store lacks is pulled first (with progress). */
export async function showOrPull(client: WickClient, model: string): Promise<ShowAnswer> {
  try {
    return await client.json<ShowAnswer>("POST", "/api/show", { model });
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 404)) throw err;
    if (!isHubRef(model)) throw new CliError(`model '${model}' not found: 'wick list' shows the store; 'wick pull hf.co/org/repo[:quant]' or 'wick create ${model} -f Modelfile' adds one`);
  }
  await pullModel(client, model);
  return client.json<ShowAnswer>("POST", "/api/show", { model });
}

/** The request of one turn: the session's system message, history, options and format. */
export function chatRequest(s: Session, messages: ChatMessage[]) {
  return {
    model: s.model,
    messages: s.system !== undefined ? [{ role: "system" as const, content: s.system }, ...messages] : messages,
    ...(Object.keys(s.options).length ? { options: s.options } : {}),
    ...(s.format ? { format: s.format } : {}),
    ...(s.keepAlive !== undefined ? { keep_alive: s.keepAlive } : {}),
  };
}
