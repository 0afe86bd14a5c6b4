/**
 * The source tree's import graph, read with the TypeScript compiler's own pre-processor (every
 * `import`, `import type`, `export … from`, `import()` and `require`), resolved to files, and the
 * layering rules it must keep (ARCHITECTURE.md, "The rooms"; trainer-daemon/protocol/README.md):
 * * the editor (extension/, webview/) reaches the daemon only through trainer-daemon/protocol/, and the protocol
 *   imports nothing else of ours;
 * * the protocol is browser-safe but for protocol/node/: no other protocol file imports node:* builtins, a
 *   Node-only package (ws, vscode-jsonrpc/node, …) or protocol/node/;
 * * the pages (webview/) import nothing Node-only either (no protocol/node/, no builtins) and nothing of extension/;
 *   the extension imports nothing of webview/: what both sides use lives in protocol/ui/;
 * * no file imports itself back through a circle of imports, and no room imports itself back through another room
 *   (an arrow that runs up: a room is a folder of trainer-daemon/, or extension/ or webview/ as a whole; a file at
 *   trainer-daemon/'s top level — daemon.ts, log.ts, storeOwnership.ts — is a room of its own); nor, inside
 *   extension/ and inside webview/, does one of their folders (`extension/debug/`) or top-level files
 *   (`extension/pickers.ts`) import itself back through another.
 */
import fs from 'node:fs';
import { isBuiltin } from 'node:module';
import path from 'node:path';
import ts from 'typescript';

const SOURCE_FOLDERS = ['extension', 'webview', 'trainer-daemon'];

export type Violation =
  | {
      readonly rule:
        | 'editor-reaches-past-protocol'
        | 'protocol-imports-out'
        | 'protocol-imports-node-only'
        | 'webview-imports-node-only'
        | 'webview-imports-extension'
        | 'extension-imports-webview';
      readonly from: string;
      /** A source file, or a package specifier (`node:fs`, `ws`) for the rules on Node-only imports. */
      readonly to: string;
    }
  | { readonly rule: 'circle'; readonly files: readonly string[] }
  | {
      readonly rule: 'room-circle';
      readonly rooms: readonly string[];
      /** One import of each arrow between two rooms of the circle, as an example to start from. */
      readonly imports: readonly string[];
    };

function sourceFiles(root: string): string[] {
  return SOURCE_FOLDERS.flatMap((folder) => {
    const dir = path.join(root, folder);
    if (!fs.existsSync(dir)) return [];
    return fs
      .readdirSync(dir, { recursive: true, encoding: 'utf8' })
      .filter(
        (file) => file.endsWith('.ts') && !file.endsWith('.d.ts') && !file.split(path.sep).includes('node_modules'),
      )
      .map((file) => path.join(folder, file).split(path.sep).join('/'));
  });
}

/** A relative specifier as the file it names (`x.ts` or `x/index.ts`); undefined for packages and non-TS files. */
function resolve(root: string, from: string, specifier: string): string | undefined {
  if (!specifier.startsWith('.')) return undefined;
  const base = path.posix.normalize(path.posix.join(path.posix.dirname(from), specifier)).replace(/\.(js|ts)$/, '');
  for (const candidate of [`${base}.ts`, `${base}/index.ts`])
    if (fs.existsSync(path.join(root, candidate))) return candidate;
  return undefined;
}

interface Imports {
  /** The source files it imports. */
  readonly files: string[];
  /** The packages and builtins it imports, as written (`zod`, `node:fs`, `vscode-jsonrpc/node`). */
  readonly packages: string[];
}

/** Each source file (root-relative, `/`-separated) with what it imports. */
function readImports(root: string): Map<string, Imports> {
  const imports = new Map<string, Imports>();
  for (const file of sourceFiles(root)) {
    const info = ts.preProcessFile(fs.readFileSync(path.join(root, file), 'utf8'), true, true);
    const specifiers = info.importedFiles.map((ref) => ref.fileName);
    const files = specifiers
      .map((specifier) => resolve(root, file, specifier))
      .filter((target): target is string => target !== undefined);
    const packages = specifiers.filter((specifier) => !specifier.startsWith('.'));
    imports.set(file, { files: [...new Set(files)], packages: [...new Set(packages)] });
  }
  return imports;
}

/** Each source file (root-relative, `/`-separated) with the source files it imports. */
export function importGraph(root: string): Map<string, string[]> {
  return new Map([...readImports(root)].map(([file, { files }]) => [file, files]));
}

/** Packages that need Node or the VS Code host: none of them may reach the browser-safe protocol or the pages. */
const NODE_ONLY_PACKAGES = ['ws', 'vscode-jsonrpc/node', 'vscode', 'better-sqlite3', 'onnxruntime-node'];

/** A package import only Node (or the extension host) has: a builtin (`node:fs`, `fs`) or one of the above. */
function isNodeOnlyPackage(specifier: string): boolean {
  return (
    isBuiltin(specifier) || NODE_ONLY_PACKAGES.some((name) => specifier === name || specifier.startsWith(`${name}/`))
  );
}

const isEditor = (file: string): boolean => file.startsWith('extension/') || file.startsWith('webview/');
const isProtocol = (file: string): boolean => file.startsWith('trainer-daemon/protocol/');
const isNodeProtocol = (file: string): boolean => file.startsWith('trainer-daemon/protocol/node/');
/** The protocol every process may import, the pages included: all of it but protocol/node/. */
const isBrowserSafeProtocol = (file: string): boolean => isProtocol(file) && !isNodeProtocol(file);

/** The room a source file belongs to (see the header): the editor's two sides are each one room here. */
export function roomOf(file: string): string {
  const parts = file.split('/');
  if (parts[0] !== 'trainer-daemon') return parts[0]!;
  return parts.length > 2 ? `trainer-daemon/${parts[1]}` : file;
}

/** Within extension/ or webview/, the room of a file there: its folder (`extension/debug`), or the file itself. */
function editorRoomOf(file: string): string {
  const parts = file.split('/');
  return parts.length > 2 ? `${parts[0]}/${parts[1]}` : file;
}

/** The strongly connected components of more than one file (or a file importing itself): Tarjan's algorithm. */
function circles(graph: Map<string, string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const onStack = new Set<string>();
  const stack: string[] = [];
  const found: string[][] = [];
  let counter = 0;
  const visit = (file: string): void => {
    index.set(file, counter);
    low.set(file, counter);
    counter += 1;
    stack.push(file);
    onStack.add(file);
    for (const next of graph.get(file) ?? []) {
      if (!index.has(next)) {
        visit(next);
        low.set(file, Math.min(low.get(file)!, low.get(next)!));
      } else if (onStack.has(next)) low.set(file, Math.min(low.get(file)!, index.get(next)!));
    }
    if (low.get(file) !== index.get(file)) return;
    const component: string[] = [];
    for (;;) {
      const member = stack.pop()!;
      onStack.delete(member);
      component.push(member);
      if (member === file) break;
    }
    if (component.length > 1 || graph.get(file)?.includes(file)) found.push(component.sort());
  };
  for (const file of [...graph.keys()].sort()) if (!index.has(file)) visit(file);
  return found;
}

export function layeringViolations(root: string): Violation[] {
  const imports = readImports(root);
  const graph = new Map([...imports].map(([file, { files }]) => [file, files]));
  const violations: Violation[] = [];
  for (const [from, { files, packages }] of imports) {
    for (const to of files) {
      if (isEditor(from) && to.startsWith('trainer-daemon/') && !isProtocol(to))
        violations.push({ rule: 'editor-reaches-past-protocol', from, to });
      if (isProtocol(from) && !isProtocol(to)) violations.push({ rule: 'protocol-imports-out', from, to });
      if (isBrowserSafeProtocol(from) && isNodeProtocol(to))
        violations.push({ rule: 'protocol-imports-node-only', from, to });
      if (from.startsWith('webview/') && isNodeProtocol(to))
        violations.push({ rule: 'webview-imports-node-only', from, to });
      if (from.startsWith('webview/') && to.startsWith('extension/'))
        violations.push({ rule: 'webview-imports-extension', from, to });
      if (from.startsWith('extension/') && to.startsWith('webview/'))
        violations.push({ rule: 'extension-imports-webview', from, to });
    }
    for (const to of packages.filter(isNodeOnlyPackage)) {
      if (isBrowserSafeProtocol(from)) violations.push({ rule: 'protocol-imports-node-only', from, to });
      if (from.startsWith('webview/')) violations.push({ rule: 'webview-imports-node-only', from, to });
    }
  }
  for (const files of circles(graph)) violations.push({ rule: 'circle', files });
  violations.push(...roomCircles(graph, roomOf));
  for (const side of ['extension/', 'webview/']) {
    const within = new Map(
      [...graph]
        .filter(([from]) => from.startsWith(side))
        .map(([from, targets]) => [from, targets.filter((to) => to.startsWith(side))]),
    );
    violations.push(...roomCircles(within, editorRoomOf));
  }
  return violations;
}

/** Circles between rooms: the file graph folded onto rooms, each arrow with the first import that makes it. */
function roomCircles(graph: Map<string, string[]>, room: (file: string) => string): Violation[] {
  const rooms = new Map<string, string[]>();
  const example = new Map<string, string>();
  for (const [from, targets] of graph) {
    const a = room(from);
    if (!rooms.has(a)) rooms.set(a, []);
    for (const to of targets) {
      const b = room(to);
      if (a === b || rooms.get(a)!.includes(b)) continue;
      rooms.get(a)!.push(b);
      example.set(`${a} → ${b}`, `${from} → ${to}`);
    }
  }
  return circles(rooms).map((members) => ({
    rule: 'room-circle',
    rooms: members,
    imports: [...example]
      .filter(([arrow]) => {
        const [a, b] = arrow.split(' → ');
        return members.includes(a!) && members.includes(b!);
      })
      .map(([, imported]) => imported)
      .sort(),
  }));
}
