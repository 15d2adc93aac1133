#include <pthread.h>
#include <unistd.h>
#include <sys/wait.h>
#include <stdio.h>
static void *run(void *arg) {
    (void)arg;
    usleep(200000);
    char *argv[] = {"echo", "from-thread", NULL};
    execv("/bin/echo", argv);
    perror("execv");
    return NULL;
}
int main(void) {
    pid_t child = fork();
    if (child == 0) { usleep(500000); _exit(0); }
    pthread_t t;
    pthread_create(&t, NULL, run, NULL);
    int status;
    waitpid(child, &status, 0);
    return 0;
}
