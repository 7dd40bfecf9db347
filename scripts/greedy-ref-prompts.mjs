// The prompts of the parity reference files (greedy-ref.mjs, greedy-ref-server.mjs).
export const PROMPTS = [
  "Hello",
  "The quick brown fox jumps over the lazy dog.",
  "In 1492, Columbus sailed",
  "def fib(n):\n    return",
  "Wick serves models: éàü 日本語 🙂",
];
