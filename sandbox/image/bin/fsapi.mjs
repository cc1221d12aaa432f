// The file operations of the sandbox service API (what n8n's `@n8n/sandbox-client` calls), as
// worker operations. Unlike the workspace operations of ops.mjs they take any path the sandbox
// user may reach, as n8n's own service does: they run inside the container as that user, so
// the container's read-only root, its own mounts and the kernel's permissions are the bounds,
// and a symlink resolves inside the container's filesystem, never the host's. Relative paths
// are taken from the home directory.
//
// Errors carry the codes the host maps to HTTP statuses: missing (404), exists (409),
// not_empty (409), is_dir / not_dir / invalid (400), too_large (413), denied (403).
import { promises as fs } from 'node:fs';
import path from 'node:path';
// A cycle (ops.mjs offers these handlers), harmless: WorkerError is used only in calls.
import { WorkerError } from './ops.mjs';

const HOME = '/home/user';
const MAX_ENTRIES = 100000;

function resolve(p) {
  if (typeof p !== 'string' || p === '') throw new WorkerError('invalid', 'a path is required');
  if (p.includes('\0')) throw new WorkerError('invalid', 'a path cannot contain a NUL byte');
  return path.resolve(HOME, p);
}

// The filesystem's error as one of ours, naming the path the caller gave.
function translate(error, p) {
  const codes = {
    ENOENT: ['missing', `${p}: no such file or directory`],
    EEXIST: ['exists', `${p}: already exists`],
    ENOTEMPTY: ['not_empty', `${p}: the directory is not empty (pass recursive=true)`],
    EISDIR: ['is_dir', `${p}: is a directory`],
    ENOTDIR: ['not_dir', `${p}: a part of the path is not a directory`],
    EACCES: ['denied', `${p}: permission denied`],
    EPERM: ['denied', `${p}: operation not permitted`],
    EROFS: ['denied', `${p}: read-only file system (write under /home/user or /tmp)`],
    ENOSPC: ['workspace_full', `${p}: no space left on the sandbox's disk`],
    EDQUOT: ['workspace_full', `${p}: no space left on the sandbox's disk`],
    ELOOP: ['invalid', `${p}: too many levels of symbolic links`],
    ENAMETOOLONG: ['invalid', `${p}: the name is too long`],
  };
  const found = codes[error?.code];
  return found ? new WorkerError(found[0], found[1]) : error;
}

async function guarded(p, work) {
  try {
    return await work();
  } catch (error) {
    throw error instanceof WorkerError ? error : translate(error, p);
  }
}

async function exists(target) {
  try {
    await fs.lstat(target);
    return true;
  } catch (error) {
    if (error.code === 'ENOENT') return false;
    throw error;
  }
}

async function fsRead({ path: p, maxBytes }) {
  const target = resolve(p);
  return guarded(p, async () => {
    const info = await fs.stat(target);
    if (info.isDirectory()) throw new WorkerError('is_dir', `${p}: is a directory`);
    if (info.size > maxBytes) {
      throw new WorkerError('too_large', `${p}: ${info.size} bytes, over the ${maxBytes}-byte limit of one read`);
    }
    return { content: (await fs.readFile(target)).toString('base64') };
  });
}

async function fsWrite({ path: p, content, overwrite = true, append = false, maxBytes }) {
  const target = resolve(p);
  const data = Buffer.from(content, 'base64');
  if (data.length > maxBytes) {
    throw new WorkerError('too_large', `${data.length} bytes is over the ${maxBytes}-byte upload limit`);
  }
  return guarded(p, async () => {
    if (append) {
      // As n8n's service: appending needs the folder (404 otherwise), creates the file.
      await fs.appendFile(target, data);
      return { bytes: data.length };
    }
    await fs.mkdir(path.dirname(target), { recursive: true });
    // wx: fails with EEXIST instead of replacing, in one step (no check-then-write race).
    await fs.writeFile(target, data, { flag: overwrite ? 'w' : 'wx' });
    return { bytes: data.length };
  });
}

async function fsDelete({ path: p, recursive = false, force = false }) {
  const target = resolve(p);
  if (target === '/' || target === HOME) throw new WorkerError('invalid', `${p}: refusing to delete it`);
  return guarded(p, async () => {
    let info;
    try {
      info = await fs.lstat(target);
    } catch (error) {
      if (error.code === 'ENOENT' && force) return {};
      throw error;
    }
    if (info.isDirectory()) {
      await (recursive ? fs.rm(target, { recursive: true, force: true }) : fs.rmdir(target));
    } else {
      await fs.unlink(target);
    }
    return {};
  });
}

async function fsCopy({ src, dest, recursive = false, overwrite = false }) {
  const from = resolve(src);
  const to = resolve(dest);
  return guarded(src, async () => {
    const info = await fs.stat(from);
    if (info.isDirectory() && !recursive) {
      throw new WorkerError('is_dir', `${src}: is a directory (pass recursive=true to copy it)`);
    }
    if (!overwrite && (await exists(to))) throw new WorkerError('exists', `${dest}: already exists`);
    await fs.cp(from, to, {
      recursive: info.isDirectory(),
      force: overwrite,
      errorOnExist: !overwrite,
      verbatimSymlinks: true,
    });
    return {};
  });
}

async function fsMove({ src, dest, overwrite = false }) {
  const from = resolve(src);
  const to = resolve(dest);
  return guarded(src, async () => {
    await fs.lstat(from);
    if (!overwrite && (await exists(to))) throw new WorkerError('exists', `${dest}: already exists`);
    try {
      await fs.rename(from, to);
    } catch (error) {
      if (error.code !== 'EXDEV') throw error;
      // Another filesystem (/tmp is a tmpfs): copy, then remove the source.
      await fs.cp(from, to, { recursive: true, force: overwrite, verbatimSymlinks: true });
      await fs.rm(from, { recursive: true, force: true });
    }
    return {};
  });
}

async function fsMkdir({ path: p, recursive = false }) {
  const target = resolve(p);
  return guarded(p, async () => {
    if (recursive) {
      const info = await fs.stat(target).catch(() => null);
      if (info && !info.isDirectory()) throw new WorkerError('exists', `${p}: exists and is not a directory`);
      await fs.mkdir(target, { recursive: true });
    } else {
      await fs.mkdir(target);
    }
    return {};
  });
}

function kind(info) {
  return info.isDirectory() ? 'directory' : 'file';
}

async function fsStat({ path: p }) {
  const target = resolve(p);
  return guarded(p, async () => {
    const info = await fs.stat(target);
    return {
      name: path.basename(target),
      path: target,
      type: kind(info),
      size: info.size,
      created_at: info.birthtime.toISOString(),
      modified_at: info.mtime.toISOString(),
    };
  });
}

// A directory's entries (names relative to it; with `recursive`, paths below it), symlinks
// listed as what they point to without being followed into.
async function fsList({ path: p = HOME, recursive = false, extension = '', maxEntries = MAX_ENTRIES }) {
  const root = resolve(p);
  const limit = Math.min(maxEntries, MAX_ENTRIES);
  return guarded(p, async () => {
    const info = await fs.stat(root);
    if (!info.isDirectory()) throw new WorkerError('not_dir', `${p}: is not a directory`);
    const entries = [];
    const queue = [''];
    while (queue.length > 0 && entries.length < limit) {
      const relative = queue.shift();
      const names = (await fs.readdir(path.join(root, relative))).sort();
      for (const name of names) {
        const rel = relative ? `${relative}/${name}` : name;
        let stat;
        try {
          stat = await fs.lstat(path.join(root, rel));
        } catch {
          continue; // removed meanwhile
        }
        const isDir = stat.isDirectory();
        if (isDir && recursive) queue.push(rel);
        if (extension && (isDir || !name.endsWith(extension))) continue;
        entries.push({ name: rel, size: stat.size, is_dir: isDir, type: kind(stat), mod_time: stat.mtime.toISOString() });
        if (entries.length >= limit) break;
      }
    }
    return entries;
  });
}

export const fsHandlers = { fsRead, fsWrite, fsDelete, fsCopy, fsMove, fsMkdir, fsStat, fsList };
