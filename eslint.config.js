// Lint for the TypeScript (`npm run lint`, also run by scripts/test.sh): ESLint 9 with
// typescript-eslint's typed rules; the layout is Prettier's (.prettierrc.json). Both are pure
// JavaScript. Not Biome: the repository's .npmrc sets omit=optional, and Biome ships its binary
// as per-platform optional packages, so an install here would leave it without one.
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["ts/native/**", "dist/**", "target/**", ".cache/**", "npm/**", "ui/build/**"] },
  {
    // ui/: the chat page, typed by its own ui/tsconfig.json (DOM, no Node).
    files: ["ts/**/*.ts", "test/**/*.ts", "ui/**/*.ts"],
    extends: [js.configs.recommended, ...tseslint.configs.recommendedTypeChecked],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      // A `!` or `as` that changes nothing only hides what the checker knows (without
      // noUncheckedIndexedAccess, `xs[0]!` is already `T`).
      "@typescript-eslint/no-unnecessary-type-assertion": "error",
      // `_` names a value skipped on purpose.
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_", destructuredArrayIgnorePattern: "^_", caughtErrors: "none" }],
      // `let [v, ...keys]` where only v changes is clearer than splitting the destructuring.
      "prefer-const": ["error", { destructuring: "all" }],
      // Off: `async` is kept where a function must return a promise or match an async interface
      // (a reader's skip(), one-chunk async generators); removing it changes signatures, not bugs.
      "@typescript-eslint/require-await": "off",
      // Off: terminal output is matched for its ANSI escapes (\x1b) on purpose.
      "no-control-regex": "off",
    },
  },
  {
    files: ["test/**/*.ts"],
    rules: {
      // Off in tests: HTTP answers are read with `res.json()` (any) and checked field by field;
      // typing every answer would be a rewrite of the tests for no caught bug.
      "@typescript-eslint/no-explicit-any": "off",
      "@typescript-eslint/no-unsafe-assignment": "off",
      "@typescript-eslint/no-unsafe-member-access": "off",
      "@typescript-eslint/no-unsafe-argument": "off",
      "@typescript-eslint/no-unsafe-call": "off",
      "@typescript-eslint/no-unsafe-return": "off",
    },
  },
);
