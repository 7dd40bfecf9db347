/**
 * Chat templates: the GGUF's `tokenizer.chat_template` (Jinja) rendered with
 * @huggingface/jinja, whose `tojson` matches Python's separators as transformers renders
 * them. `raise_exception` comes with the library; a template that raises is the request's
 * fault (e.g. roles that do not alternate), so it becomes a 400 naming `messages`.
 */
import { Template } from "@huggingface/jinja";
import { RequestError } from "./errors.ts";

/** llama.cpp's fallback when a GGUF has no template. */
export const CHATML_TEMPLATE =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/** A message as templates expect it (HF convention: tool-call arguments are objects). */
export interface TemplateMessage {
  role: string;
  content: string;
  name?: string;
  tool_calls?: { id?: string; type: "function"; function: { name: string; arguments: unknown } }[];
  tool_call_id?: string;
}

export interface TemplateSpecials {
  bos_token: string;
  eos_token: string;
}

export class ChatTemplate {
  private readonly template: Template;

  /** Throws if the source does not parse: a model with a broken template should not load silently. */
  constructor(
    readonly source: string,
    private readonly specials: TemplateSpecials,
  ) {
    this.template = new Template(source);
  }

  /** `vars`: more context, e.g. `enable_thinking` (see reasoning-plan.ts). */
  render(messages: TemplateMessage[], opts: { addGenerationPrompt: boolean; tools?: unknown[]; vars?: Record<string, unknown> }): string {
    try {
      return this.template.render({
        ...opts.vars,
        messages,
        add_generation_prompt: opts.addGenerationPrompt,
        ...(opts.tools?.length ? { tools: opts.tools } : {}),
        bos_token: this.specials.bos_token,
        eos_token: this.specials.eos_token,
      });
    } catch (err) {
      const why = err instanceof Error ? err.message : String(err);
      throw new RequestError("INVALID_REQUEST", `The chat template rejected the messages: ${why}`, "messages", "chat_template_error");
    }
  }
}
