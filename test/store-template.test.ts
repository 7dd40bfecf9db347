/**
 * Go templates as Ollama's Modelfile TEMPLATEs use them: the syntax table, parse errors with
 * positions, and real templates (ChatML, Mistral, Llama 3, Gemma 3, a tools template) rendered
 * through Ollama's prompt rules against hand-written expected prompts.
 */
import test from "ava";
import { StoreError } from "../ts/store/errors.ts";
import { GoTemplate, renderGoTemplate } from "../ts/store/go-template.ts";
import { collate, renderOllamaPrompt, type PromptMessage } from "../ts/store/ollama-template.ts";

const msgs = [
  { role: "system", content: "sys" },
  { role: "user", content: "hi" },
  { role: "assistant", content: "hello" },
  { role: "user", content: "bye" },
];
const data = { System: "S", Prompt: "P", Response: "", Messages: msgs, Tools: [] as unknown[], N: 3, Empty: [], Obj: { b: 2, a: 1 }, Html: "<a&b>" };

const cases: [string, string, string][] = [
  ["fields", "{{ .System }}|{{ .Prompt }}|{{ .Response }}", "S|P|"],
  ["if/else", "{{ if .System }}yes{{ else }}no{{ end }}{{ if .Response }}yes{{ else }}no{{ end }}", "yesno"],
  ["else if chains", '{{ range .Messages }}{{ if eq .Role "user" }}U{{ else if eq .Role "assistant" }}A{{ else }}?{{ end }}{{ end }}', "?UAU"],
  ["range with index and element, $ root", "{{ range $i, $m := .Messages }}{{ $i }}{{ $m.Role }}{{ $.N }},{{ end }}", "0system3,1user3,2assistant3,3user3,"],
  ["range sets dot; role and content", "{{ range .Messages }}{{ .Role }} {{ .Content }};{{ end }}", "system sys;user hi;assistant hello;user bye;"],
  ["range else on empty", "{{ range .Empty }}x{{ else }}none{{ end }}", "none"],
  ["range over an integer", "{{ range .N }}{{ . }}{{ end }}", "012"],
  ["range over a map in key order", "{{ range $k, $v := .Obj }}{{ $k }}={{ $v }} {{ end }}", "a=1 b=2 "],
  ["break and continue", "{{ range $i, $_ := .Messages }}{{ if eq $i 1 }}{{ continue }}{{ end }}{{ if eq $i 3 }}{{ break }}{{ end }}{{ $i }}{{ end }}", "02"],
  ["with", "{{ with .Prompt }}[{{ . }}]{{ end }}{{ with .Response }}x{{ else }}empty{{ end }}", "[P]empty"],
  ["and/or/not return operands", '{{ and .System .Prompt }}|{{ or .Response "dflt" }}|{{ not .Response }}|{{ and .Response "x" }}|', "P|dflt|true||"],
  ["eq with several operands, ne, lt", '{{ eq .N 1 2 3 }} {{ ne .N 3 }} {{ lt 1 2 }} {{ ge "b" "a" }}', "true false true true"],
  [
    "len and slice (the last-message idiom)",
    '{{ range $i, $_ := .Messages }}{{ if eq (len (slice $.Messages $i)) 1 }}last={{ .Content }}{{ end }}{{ end }} {{ len .System }} {{ slice "hello" 1 3 }}',
    "last=bye 1 el",
  ],
  ["index", '{{ (index .Messages 1).Content }} {{ index .Obj "b" }}', "hi 2"],
  ["variables declared and reassigned", '{{ $x := "a" }}{{ range .Messages }}{{ $x = .Role }}{{ end }}{{ $x }}', "user"],
  ["trim markers", "a  \n{{- .Prompt -}}\n  b {{- /* comment */ -}} c", "aPbc"],
  ["a dash without a space is a negative number", "{{-3}}", "-3"],
  ["json escapes like Go", "{{ json .Html }} {{ json .Obj }}", '"\\u003ca\\u0026b\\u003e" {"b":2,"a":1}'],
  ["objects print as JSON", "{{ .Obj }}", '{"b":2,"a":1}'],
  ["print and printf", '{{ print 1 2 "x" 3 }} {{ printf "%s-%d-%q" "a" 7 "b" }}', '1 2x3 a-7-"b"'],
  ["pipelines pass the value as the last argument", '{{ .Prompt | printf "<%s>" }} {{ "x" | eq "x" }}', "<P> true"],
  ["parenthesised pipeline with a field", "{{ (index .Messages 0).Role }}", "system"],
  ["missing fields are empty and false", "[{{ .Nope }}]{{ if .Nope.Deeper }}x{{ end }}", "[]"],
  ["raw strings and escapes", '{{ `a\\n` }}{{ "b\\n" }}', "a\\nb\n"],
  ["snake_case JSON names answer Go field names", "{{ range .L }}{{ .ToolCalls }}{{ .ToolName }}{{ end }}", '[{"function":{"name":"f"}}]get'],
];

for (const [title, src, want] of cases) {
  test(`go template: ${title}`, (t) => {
    t.is(renderGoTemplate(src, { ...data, L: [{ tool_calls: [{ function: { name: "f" } }], tool_name: "get" }] }), want);
  });
}

const parseErrors: [string, string, RegExp][] = [
  ["an unclosed action", "ab\n  {{ .Prompt ", /^template: line 2, column 3: unclosed action/],
  ["a missing end", "{{ if .X }}b", /has no \{\{end\}\}/],
  ["a stray end", "x{{ end }}", /^template: line 1, column 5: unexpected \{\{end\}\}/],
  ["an unknown function", "x\n  {{ foo .X }}", /^template: line 2, column 6: function "foo" not defined/],
  ["an unterminated string", '{{ "abc }}', /^template: line 1, column 4: unexpected "\\"" in action/],
  ["an unclosed paren", "{{ (len .X }}", /unclosed left paren/],
  ["template/define", '{{ template "x" }}', /\{\{template\}\} is not supported/],
  ["else with an operand", "{{ if .A }}{{ else .B }}{{ end }}", /unexpected operand after else/],
];
for (const [title, src, why] of parseErrors) {
  test(`go template parse error: ${title}`, (t) => {
    const err = t.throws(() => GoTemplate.parse(src), { instanceOf: StoreError });
    t.is(err?.code, "INVALID_TEMPLATE");
    t.regex(err?.message ?? "", why);
  });
}

test("go template execution errors name the position", (t) => {
  t.throws(() => renderGoTemplate("{{ index .L 5 }}", { L: [1] }), { message: /^template: line 1, column 4: index out of range: 5/ });
  t.throws(() => renderGoTemplate("\n {{ .X 1 }}", { X: 1 }), { message: /^template: line 2, column 5: can't give argument to non-function \.X/ });
  t.throws(() => renderGoTemplate('{{ range "str" }}{{ end }}', {}), { message: /range can't iterate over str/ });
});

test("identifiers are what Ollama's Vars reports", (t) => {
  t.deepEqual(GoTemplate.parse("{{ .System }} {{ .Prompt }}").identifiers(), ["prompt", "system"]);
  t.deepEqual(GoTemplate.parse('{{ range .Messages }}{{ if eq .Role "tool" }}{{ .ToolName }} {{ .Content }}{{ end }}{{ end }}').identifiers(), ["content", "messages", "role", "toolname"]);
});

test("collate merges same-role runs (never tool messages) and gathers system text", (t) => {
  const { system, messages } = collate([
    { role: "system", content: "a" },
    { role: "system", content: "b" },
    { role: "user", content: "1" },
    { role: "user", content: "2" },
    { role: "tool", content: "x" },
    { role: "tool", content: "y" },
  ]);
  t.is(system, "a\n\nb");
  t.deepEqual(
    messages.map((m) => [m.role, m.content]),
    [
      ["system", "a\n\nb"],
      ["user", "1\n\n2"],
      ["tool", "x"],
      ["tool", "y"],
    ],
  );
});

// Ollama's template tests (template_test.go TestExecuteWithMessages): legacy and .Messages templates give one prompt.
const mistral = {
  noResponse: "[INST] {{ if .System }}{{ .System }}\n\n{{ end }}{{ .Prompt }}[/INST] ",
  response: "[INST] {{ if .System }}{{ .System }}\n\n{{ end }}{{ .Prompt }}[/INST] {{ .Response }}",
  messages:
    '[INST] {{ if .System }}{{ .System }}\n\n{{ end }}\n{{- range .Messages }}\n{{- if eq .Role "user" }}{{ .Content }}[/INST] {{ else if eq .Role "assistant" }}{{ .Content }}[INST] {{ end }}\n{{- end }}',
};
const friend: PromptMessage[] = [
  { role: "user", content: "Hello friend!" },
  { role: "assistant", content: "Hello human!" },
  { role: "user", content: "What is your name?" },
];

for (const [name, src] of Object.entries(mistral)) {
  test(`Ollama prompt: Mistral (${name})`, (t) => {
    t.is(renderOllamaPrompt(src, { messages: friend }), "[INST] Hello friend![/INST] Hello human![INST] What is your name?[/INST] ");
    t.is(
      renderOllamaPrompt(src, { messages: [{ role: "system", content: "You are a helpful assistant!" }, ...friend] }),
      "[INST] You are a helpful assistant!\n\nHello friend![/INST] Hello human![INST] What is your name?[/INST] ",
    );
  });
}

const chatml = {
  response:
    "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}{{ if .Prompt }}<|im_start|>user\n{{ .Prompt }}<|im_end|>\n{{ end }}<|im_start|>assistant\n{{ .Response }}<|im_end|>\n",
  messages: "\n{{- range $index, $_ := .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n",
};
for (const [name, src] of Object.entries(chatml)) {
  test(`Ollama prompt: ChatML (${name})`, (t) => {
    t.is(
      renderOllamaPrompt(src, { messages: [{ role: "system", content: "You are a helpful assistant!" }, ...friend] }),
      "<|im_start|>system\nYou are a helpful assistant!<|im_end|>\n<|im_start|>user\nHello friend!<|im_end|>\n<|im_start|>assistant\nHello human!<|im_end|>\n<|im_start|>user\nWhat is your name?<|im_end|>\n<|im_start|>assistant\n",
    );
  });
}

const conversation: PromptMessage[] = [
  { role: "user", content: "Hello, how are you?" },
  { role: "assistant", content: "I'm doing great. How can I help you today?" },
  { role: "user", content: "I'd like to show off how chat templating works!" },
];

test("Ollama prompt: Llama 3 instruct (template/llama3-instruct.gotmpl)", (t) => {
  const src =
    "{{- if .Messages }}\n{{- if .System }}<|start_header_id|>system<|end_header_id|>\n\n{{ .System }}<|eot_id|>\n{{- end }}\n{{- range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n{{ .Content }}<|eot_id|>\n{{- end }}<|start_header_id|>assistant<|end_header_id|>\n\n{{ else -}}\n{{ if .System }}<|start_header_id|>system<|end_header_id|>\n\n{{ .System }}<|eot_id|>{{ end }}{{ if .Prompt }}<|start_header_id|>user<|end_header_id|>\n\n{{ .Prompt }}<|eot_id|>{{ end }}<|start_header_id|>assistant<|end_header_id|>\n\n{{ .Response }}<|eot_id|>\n{{- end -}}";
  t.is(
    renderOllamaPrompt(src, { messages: conversation }),
    "<|start_header_id|>user<|end_header_id|>\n\nHello, how are you?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI'm doing great. How can I help you today?<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nI'd like to show off how chat templating works!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
  );
});

test("Ollama prompt: Gemma 3 instruct (template/gemma3-instruct.gotmpl)", (t) => {
  const src =
    '{{- $system := .System }}\n{{- range $i, $_ := .Messages }}\n{{- $last := eq (len (slice $.Messages $i)) 1 }}\n{{- if eq .Role "user" }}<start_of_turn>user\n{{- if and (eq $i 1) $system }}\n{{ $system }}\n{{- end }}\n{{ .Content }}<end_of_turn>\n{{ else if eq .Role "assistant" }}<start_of_turn>model\n{{ .Content }}<end_of_turn>\n{{ end }}\n{{- if $last }}<start_of_turn>model\n{{ end }}\n{{- end }}\n';
  t.is(
    renderOllamaPrompt(src, { messages: [{ role: "system", content: "You are a helpful assistant." }, ...conversation] }),
    "<start_of_turn>user\nYou are a helpful assistant.\nHello, how are you?<end_of_turn>\n<start_of_turn>model\nI'm doing great. How can I help you today?<end_of_turn>\n<start_of_turn>user\nI'd like to show off how chat templating works!<end_of_turn>\n<start_of_turn>model\n\n",
  );
});

test("Ollama prompt: a tools template (Llama 3.1 style: $.Tools, json, tool calls, tool results)", (t) => {
  const src =
    '{{- if .Tools }}Tools:\n{{- range .Tools }}\n{{ json .Function }}\n{{- end }}\n{{ end }}\n{{- range $i, $_ := .Messages }}\n{{- $last := eq (len (slice $.Messages $i)) 1 }}\n{{- if eq .Role "user" }}U: {{ .Content }}\n{{ else if eq .Role "assistant" }}A:{{ range .ToolCalls }} {"name": "{{ .Function.Name }}", "parameters": {{ .Function.Arguments }}}{{ end }}{{ .Content }}\n{{ else if eq .Role "tool" }}T({{ .ToolName }}): {{ .Content }}\n{{ end }}\n{{- if and $last (ne .Role "assistant") }}A:{{ end }}\n{{- end }}';
  const tools = [{ type: "function", function: { name: "get_weather", description: "Weather <now>", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
  const messages: PromptMessage[] = [
    { role: "user", content: "Weather in Paris?" },
    { role: "assistant", content: "", tool_calls: [{ function: { name: "get_weather", arguments: { city: "Paris" } } }] },
    { role: "tool", content: "22C", tool_name: "get_weather" },
  ];
  t.is(
    renderOllamaPrompt(src, { messages, tools }),
    'Tools:\n{"name":"get_weather","description":"Weather \\u003cnow\\u003e","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}\nU: Weather in Paris?\nA: {"name": "get_weather", "parameters": {"city":"Paris"}}\nT(get_weather): 22C\nA:',
  );
});

test("Ollama prompt: a template without .Response gets one, so earlier turns keep their replies", (t) => {
  t.is(renderOllamaPrompt("<{{ .Prompt }}>", { messages: friend }), "<Hello friend!>Hello human!<What is your name?>");
});
