// as-job UID GID DIR COMMAND [ARG]...: COMMAND run as UID, in group GID alone, from DIR.
//
// The job launcher (launcher.py) starts each command through it with posix_spawn, which
// vforks: under gVisor a fork of the launcher costs ~30 ms, a vfork ~7 (docs/performance.md),
// and a vfork cannot change the child's uid itself. It holds the launcher's CAP_SETUID and
// CAP_SETGID until its setuid: every uid then changes from 0 to UID, which clears all of its
// capabilities before COMMAND runs. Run by anyone else it has no capability, changes nothing
// and fails. Built at image build: cc -O2 as-job.c -o as-job
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Never root, nor a system account: the sandbox user (1000) or a job's uid above it.
#define LOWEST_ID 1000

static long id_of(const char *text) {
  char *end;
  errno = 0;
  long id = strtol(text, &end, 10);
  return (errno || *end || end == text || id < LOWEST_ID || id > 2147483647) ? -1 : id;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fputs("as-job: UID GID DIR COMMAND [ARG]...\n", stderr);
    return 127;
  }
  long uid = id_of(argv[1]), gid = id_of(argv[2]);
  if (uid < 0 || gid < 0) {
    fprintf(stderr, "the command could not start: uid %s, gid %s: a job runs as the sandbox "
            "user or above it\n", argv[1], argv[2]);
    return 127;
  }
  gid_t group = (gid_t)gid;
  if (setgroups(1, &group) != 0 || setgid(group) != 0 || setuid((uid_t)uid) != 0) {
    fprintf(stderr, "the command could not start: %s\n", strerror(errno));
    return 126;
  }
  if (chdir(argv[3]) != 0) {
    fprintf(stderr, "the command could not start: %s: %s\n", argv[3], strerror(errno));
    return 127;
  }
  execvp(argv[4], argv + 4);
  int failed = errno;
  fprintf(stderr, "the command could not start: %s: %s\n", argv[4], strerror(failed));
  return failed == ENOENT ? 127 : 126;
}
