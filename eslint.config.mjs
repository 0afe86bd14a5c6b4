// `npm run lint` (with Prettier and ruff): typescript-eslint, type-aware — the recommended type-checked rules, where a
// promise left unawaited, an `any` crossing a boundary or a needless assertion is caught before review.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/** Node's globals, for the scripts (the `globals` package is not a dependency for this short list). */
const NODE_GLOBALS = Object.fromEntries(
  [
    'process',
    'console',
    'Buffer',
    'URL',
    'URLSearchParams',
    'setTimeout',
    'clearTimeout',
    'setInterval',
    'clearInterval',
    'setImmediate',
    'clearImmediate',
    'fetch',
    'AbortController',
    'AbortSignal',
    'TextDecoder',
    'TextEncoder',
    'performance',
    'structuredClone',
    'queueMicrotask',
  ].map((name) => [name, 'readonly']),
);
const COMMONJS_GLOBALS = {
  require: 'readonly',
  module: 'writable',
  exports: 'writable',
  __dirname: 'readonly',
  __filename: 'readonly',
};

export default tseslint.config(
  {
    ignores: ['dist/**', 'node_modules/**', '.cache/**', 'test-results/**', 'test/fixtures/**'],
  },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      // node:test's test() and describe() return promises its runner awaits.
      '@typescript-eslint/no-floating-promises': [
        'error',
        {
          allowForKnownSafeCalls: [
            { from: 'package', package: 'node:test', name: ['test', 'describe', 'it', 'suite'] },
          ],
        },
      ],
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' },
      ],
      // Re-throwing what a catch or a worker's failure held (typed unknown) is the point, not a mistake.
      '@typescript-eslint/only-throw-error': ['error', { allowThrowingUnknown: true }],
      '@typescript-eslint/prefer-promise-reject-errors': ['error', { allowThrowingUnknown: true }],
      // An async method that implements a Promise-returning interface reads better than `return Promise.resolve()`.
      '@typescript-eslint/require-await': 'off',
      // A binding assigned once, after closures that read it were made (a cycle broken by assignment), stays `let`.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
      // A switch on a union names every member (a new algorithm, message or status is a compile-time list of places
      // to visit); a `default:` may stand for the rest only where the union is not ours to close (a string).
      '@typescript-eslint/switch-exhaustiveness-check': [
        'error',
        { considerDefaultExhaustiveForUnions: false, requireDefaultForNonUnion: false },
      ],
    },
  },
  {
    // Tests read JSON bodies and child output freely (each value is then checked by an assertion), and hand
    // async cleanups to node:test's hooks, which await them.
    files: ['test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      // Assertion messages print unknown JSON as it came.
      '@typescript-eslint/no-base-to-string': 'off',
      '@typescript-eslint/restrict-template-expressions': 'off',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false } }],
      // A test narrows a union with `default: assert.fail(…)`: the other members are the failure it checks for.
      '@typescript-eslint/switch-exhaustiveness-check': 'off',
    },
  },
  {
    // The scripts (`npm test`'s runner and provisioning, the build, CI's packaging, the `lightning` shim): plain
    // JavaScript, linted with the recommended rules but not type-aware ones, with Node's globals.
    files: ['**/*.mjs', '**/*.js', '**/*.cjs'],
    extends: [tseslint.configs.disableTypeChecked],
    languageOptions: { globals: NODE_GLOBALS },
    rules: {
      '@typescript-eslint/no-require-imports': 'off',
    },
  },
  {
    files: ['**/*.js', '**/*.cjs'],
    languageOptions: { sourceType: 'commonjs', globals: { ...NODE_GLOBALS, ...COMMONJS_GLOBALS } },
  },
);
