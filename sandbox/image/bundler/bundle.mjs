// Makes the sandbox's thread bundles at image build, on the host, with the esbuild of the
// sandbox's own npm tree:
//
//   node bundle.mjs <node_modules> <out dir> <image node_modules> <name>=<package>[,<package>]...
//
// One bundle a thread (`compiler`: the workflow SDK; `engine`: n8n-workflow and n8n-core): one
// file read instead of ~850 and ~1,900, which is most of a thread's start under gVisor, where
// every stat and open is a trip through its kernel.
//
// Classes stay single. A bundle exports a table of every file it holds, keyed by the path the
// file has in the image, each a getter that runs the file's bundled copy on first use; the
// thread's loader (bin/bundle-loader.cjs) answers any `require` that resolves to one of those
// paths from the table. So a node class of n8n-nodes-base, loaded from node_modules, that
// requires n8n-workflow gets the very module object n8n-core got, as without a bundle: one
// `NodeOperationError`, one luxon `DateTime`, and `instanceof` holds across them.
//
// Each bundled file keeps its own `__dirname` and `__filename` (its path in the image): code
// that finds files beside itself (package.json, a runtime bundle) finds them where they are.
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const [nodeModules, outDir, imageNodeModules, ...specs] = process.argv.slice(2);
const esbuild = createRequire(path.join(path.resolve(nodeModules), 'x.js'))('esbuild');
const root = path.dirname(path.resolve(nodeModules));

const inImage = (file) => path.join(imageNodeModules, path.relative(path.resolve(nodeModules), file));

// `__dirname` and `__filename` as the file's own, in the image.
const ownPaths = {
  name: 'own-paths',
  setup(build) {
    build.onLoad({ filter: /\.(c?js)$/ }, (args) => {
      const text = readFileSync(args.path, 'utf8');
      if (!/__dirname|__filename/.test(text)) return undefined;
      const file = inImage(args.path);
      const prefix = `var __filename = ${JSON.stringify(file)}, __dirname = ${JSON.stringify(path.dirname(file))};`;
      // A shebang must stay the first line.
      const body = text.startsWith('#!') ? `//${text}` : text;
      return { contents: prefix + body, loader: 'js' };
    });
  },
};

const common = {
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node24',
  logLevel: 'error',
  // Native addons stay files; optional ones a package probes for stay unresolved at run time.
  external: ['*.node'],
  absWorkingDir: root,
  plugins: [ownPaths],
};

mkdirSync(outDir, { recursive: true });
const report = {};
for (const spec of specs) {
  const [name, list] = spec.split('=');
  const packages = list.split(',');
  const entry = packages.map((p) => `require(${JSON.stringify(p)});`).join('\n');
  // First pass: which files the packages reach.
  const first = await esbuild.build({
    ...common,
    stdin: { contents: entry, resolveDir: root, loader: 'js' },
    write: false,
    metafile: true,
  });
  const files = Object.keys(first.metafile.inputs)
    .filter((input) => !input.startsWith('<stdin>') && !input.includes(':'))
    .map((input) => path.resolve(root, input));
  // Second pass: the same files, each behind a getter keyed by its path in the image.
  const table = files
    .map((file) => `  get ${JSON.stringify(inImage(file))}() { return require(${JSON.stringify(file)}); },`)
    .join('\n');
  const out = path.join(outDir, `${name}.cjs`);
  await esbuild.build({
    ...common,
    stdin: { contents: `module.exports = {\n${table}\n};\n`, resolveDir: root, loader: 'js' },
    outfile: out,
  });
  report[name] = { packages, files: files.length, bytes: readFileSync(out).length };
}
writeFileSync(path.join(outDir, 'bundles.json'), JSON.stringify(report, null, 2) + '\n');
