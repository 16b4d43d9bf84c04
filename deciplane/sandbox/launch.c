/* deciplane-launch: the host-side start of a sandboxed run in one exec, replacing the
 * chain `sh -c 'echo $$ > cgroup.procs ...'` -> `unshare --net` -> `setpriv`.
 *
 *   deciplane-launch [-c CGROUP_PROCS_FILE]... [-n] [-u UID -g GID] -- PROGRAM ARGS...
 *
 * -c: move this process into that cgroup (v1 `cgroup.procs`), before anything else;
 * -n: a new, empty network namespace (its loopback stays down);
 * -u/-g: drop to that uid/gid for good (no supplementary groups, no_new_privs).
 * Then execv(PROGRAM). Any failure: a message on stderr and exit status 125 (the
 * sandbox's "set-up failed" code), before PROGRAM ever runs. Built by
 * deciplane.sandbox.launcher with the system C compiler; without one the Python
 * side keeps the sh/unshare/setpriv chain. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

static int fail(const char *what, const char *arg) {
    fprintf(stderr, "deciplane-launch: %s %s: %s\n", what, arg ? arg : "", strerror(errno));
    return 125;
}

int main(int argc, char **argv) {
    char pid[32];
    int i, n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    int netns = 0;
    long uid = -1, gid = -1;
    for (i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (!strcmp(argv[i], "-c") && i + 1 < argc) {
            int fd = open(argv[++i], O_WRONLY | O_CLOEXEC);
            if (fd < 0 || write(fd, pid, n) != n) return fail("cannot join cgroup", argv[i]);
            close(fd);
        } else if (!strcmp(argv[i], "-n")) {
            netns = 1;
        } else if (!strcmp(argv[i], "-u") && i + 1 < argc) {
            uid = strtol(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "-g") && i + 1 < argc) {
            gid = strtol(argv[++i], NULL, 10);
        } else {
            errno = EINVAL;
            return fail("bad argument", argv[i]);
        }
    }
    if (i + 1 >= argc) {
        errno = EINVAL;
        return fail("no program after --", NULL);
    }
    if (netns && unshare(CLONE_NEWNET) != 0) return fail("unshare(CLONE_NEWNET)", NULL);
    if (uid >= 0 || gid >= 0) {
        if (uid < 0 || gid < 0) {
            errno = EINVAL;
            return fail("-u and -g go together", NULL);
        }
        if (setgroups(0, NULL) != 0) return fail("setgroups", NULL);
        if (setresgid(gid, gid, gid) != 0) return fail("setresgid", NULL);
        if (setresuid(uid, uid, uid) != 0) return fail("setresuid", NULL);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail("no_new_privs", NULL);
    }
    execv(argv[i + 1], argv + i + 1);
    return fail("cannot exec", argv[i + 1]);
}
