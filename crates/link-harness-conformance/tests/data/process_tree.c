#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
extern char **environ;
static volatile int done;
static int thread_fn(void *arg) {
    (void)arg;
    pid_t p = fork();
    if (p == 0) {
        char *argv[] = {"sleep", "0.3", NULL};
        execv("/bin/sleep", argv);
        _exit(127);
    }
    done = 1;
    syscall(SYS_exit, 0);
    return 0;
}
int main(void) {
    char *stack = malloc(65536);
    clone(thread_fn, stack + 65536,
          CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM,
          NULL);
    while (!done) usleep(1000);
    usleep(50000);
    pid_t s;
    char *targv[] = {"true", NULL};
    posix_spawnp(&s, "true", NULL, NULL, targv, environ);
    waitpid(s, NULL, 0);
    pid_t victim = fork();
    if (victim == 0) { pause(); _exit(0); }
    usleep(50000);
    kill(victim, SIGTERM);
    waitpid(victim, NULL, 0);
    while (wait(NULL) > 0) {}
    return 0;
}
