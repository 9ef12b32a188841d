/* The pod sandbox's process (the "pause" container) of the test node: holds the pod's
 * namespaces, reaps orphans as PID 1 of the pod, exits on SIGINT or SIGTERM. Built static by
 * tests/k8s/build.sh into the image localhost/pause:roce-ipvlan. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { _exit(sig == SIGTERM ? 0 : 2); }

static void reap(int sig)
{
	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

int main(void)
{
	struct sigaction sa = {0};

	sa.sa_handler = stop;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sa.sa_handler = reap;
	sa.sa_flags = SA_NOCLDSTOP;
	sigaction(SIGCHLD, &sa, NULL);
	for (;;)
		pause();
}
