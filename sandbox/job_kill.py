"""Ending a job, inside the sandbox: engines that run processes in a container (Docker, runsc)
run a job's processes as a uid of its own (`<job>:1000`), and this script, run as that uid,
reaches all of them, `setsid` escapees included, and nothing of other uids.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping

from sandbox.engine import ExecResult
from sandbox.errors import SandboxUnavailableError

__all__ = ["LIST_UIDS", "UidJobs", "jobs_listed", "kill_job_argv"]

# Run as the job uid ($1). Each round stops, then kills, every process of the uid but this
# script (`kill -1` reaches every process the caller may signal, and Linux lets a process
# signal its own uid's alone), then counts what is left of the uid that is not a zombie.
# Stopping first matters under gVisor, whose kill(-1) lets a child forked meanwhile escape:
# stopped processes fork no more, so a fork bomb dies within a round or two. But such a child
# can show up late (not yet in /proc when a round counts, later forking on; the later the
# more loaded the machine): the kill ends only after rounds in a row find nothing, three for
# a job that had a few processes, twenty (a second) for one that had many (a fork bomb).
# No fork in the loop (the count reads /proc with shell builtins): a uid at its process limit
# must still be killable. The pause lets exiting processes finish.
_KILL_ALL = """me=$1
count() {
  left=0
  for status in /proc/[0-9]*/status; do
    [ "$status" = "/proc/$$/status" ] && continue
    uid=; state=
    while read -r key value _; do
      case $key in State:) state=$value ;; Uid:) uid=$value; break ;; esac
    done 2>/dev/null <"$status"
    [ "$uid" = "$me" ] && [ "$state" != Z ] && left=$((left + 1))
  done
}
count; had=$left; round=0; clean=0
while [ $round -lt 80 ]; do
  round=$((round + 1))
  kill -STOP -1 2>/dev/null; kill -KILL -1 2>/dev/null
  count
  if [ $left -eq 0 ]; then clean=$((clean + 1)); else clean=0; fi
  [ $clean -ge 20 ] && exit 0
  [ $clean -ge 3 ] && [ $had -lt 16 ] && exit 0
  sleep 0.05 2>/dev/null
done
exit 1"""

# A kill script killed itself: another kill of the same job ran at once (another process's:
# a replica; one process runs one at a time), each the other's target. It runs again, after
# a random pause, a few times before the caller is told the job could not be killed.
KILLED_BY_ANOTHER = 137
KILL_ATTEMPTS = 3

# Every process's uid, one a line.
LIST_UIDS = ["ps", "-eo", "uid="]


def kill_job_argv(job: int) -> list[str]:
    """The command that kills every process of `job`, run as the job's uid; it exits 0 once
    none is left."""
    return ["sh", "-c", _KILL_ALL, "kill-job", str(job)]


def jobs_listed(listing: bytes, jobs: range) -> list[int]:
    """The jobs of `jobs` that LIST_UIDS's output shows a process of."""
    uids = {int(word) for word in listing.split() if word.isdigit()}
    return sorted(u for u in uids if u in jobs)


class UidJobs:
    """The seam's job calls for an engine whose jobs are uids in a container (`exec`)."""

    def exec(
        self,
        container_id: str,
        argv: list[str],
        *,
        workdir: str,
        env: Mapping[str, str] | None = None,
        job: int | None = None,
    ) -> ExecResult:
        raise NotImplementedError

    def kill_job(self, container_id: str, job: int) -> bool:
        try:
            for _ in range(KILL_ATTEMPTS):
                result = self.exec(container_id, kill_job_argv(job), workdir="/", job=job)
                if result.exit_code != KILLED_BY_ANOTHER:
                    break
                time.sleep(random.uniform(0, 0.2))  # noqa: S311 (not the same moment again)
        except SandboxUnavailableError:
            return False
        return result.exit_code == 0

    def running_jobs(self, container_id: str, jobs: range) -> list[int]:
        listing = self.exec(container_id, LIST_UIDS, workdir="/")
        return jobs_listed(listing.stdout, jobs)
