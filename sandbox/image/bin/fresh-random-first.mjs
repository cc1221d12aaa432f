// Installs fresh-random.cjs before any other module of the worker is evaluated: imported first,
// so that what those modules take from node:crypto as they load is already the kernel's.
import { createRequire } from 'node:module';

const freshRandom = createRequire(import.meta.url)('./fresh-random.cjs');
freshRandom.install();

export const { reseedOpenssl } = freshRandom;
