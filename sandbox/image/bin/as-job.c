// as-job UID GID DIR PROCESSES COMMAND [ARG]...: COMMAND run as UID, in group GID alone, from
// DIR, with at most PROCESSES tasks of its uid (RLIMIT_NPROC, soft and hard; "-": the sandbox's).
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
#include <sys/resource.h>
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
  if (argc < 6) {
    fputs("as-job: UID GID DIR PROCESSES COMMAND [ARG]...\n", stderr);
    return 127;
  }
  long uid = id_of(argv[1]), gid = id_of(argv[2]), processes = -1;
  if (strcmp(argv[4], "-") != 0) {
    char *end;
    errno = 0;
    processes = strtol(argv[4], &end, 10);
    if (errno || *end || end == argv[4] || processes < 1) {
      fprintf(stderr, "the command could not start: a process limit of %s\n", argv[4]);
      return 127;
    }
  }
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
  // Set here, after the setuid (which Linux refuses to a uid already over its limit), in
  // this process alone: the launcher and the commands it starts later keep their own.
  struct rlimit limit = {(rlim_t)processes, (rlim_t)processes};
  if (processes > 0 && setrlimit(RLIMIT_NPROC, &limit) != 0) {
    fprintf(stderr, "the command could not start: %s\n", strerror(errno));
    return 126;
  }
  if (chdir(argv[3]) != 0) {
    fprintf(stderr, "the command could not start: %s: %s\n", argv[3], strerror(errno));
    return 127;
  }
  execvp(argv[5], argv + 5);
  int failed = errno;
  fprintf(stderr, "the command could not start: %s: %s\n", argv[5], strerror(failed));
  return failed == ENOENT ? 127 : 126;
}
