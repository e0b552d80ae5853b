/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * process.c - child processes, ports and files for the test-broker launcher.
 */
#define _GNU_SOURCE /* prctl, environ */
#include "tb_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mqc_clock.h"
#include "mqc_strutil.h"

extern char **environ;

static void sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

/*
 * Build an environment with LD_PRELOAD set; NULL preload means "inherit unchanged". A broker
 * with a sanitizer runtime preloaded (for a sanitized probe) must not report mosquitto's own
 * exit-time leaks, so ASAN_OPTIONS becomes detect_leaks=0; memory errors still stop it.
 */
static char **make_env(const char *preload, char **storage)
{
	static char asan_options[] = "ASAN_OPTIONS=detect_leaks=0";
	if (!preload)
		return environ;
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = calloc(n + 3, sizeof *env);
	size_t len = strlen(preload) + sizeof "LD_PRELOAD=";
	*storage = malloc(len);
	if (!env || !*storage) {
		free(env);
		free(*storage);
		*storage = NULL;
		return NULL;
	}
	snprintf(*storage, len, "LD_PRELOAD=%s", preload);
	size_t j = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0
		    && strncmp(environ[i], "ASAN_OPTIONS=", 13) != 0)
			env[j++] = environ[i];
	env[j++] = *storage;
	env[j++] = asan_options;
	env[j] = NULL;
	return env;
}

pid_t tb__spawn(
    char *const argv[], const char *log_path, const char *preload, char *err, size_t errlen)
{
	char *preload_storage = NULL;
	char **env = make_env(preload, &preload_storage);
	if (!env) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	int out
	    = open(log_path ? log_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (out < 0) {
		snprintf(
		    err, errlen, "cannot open %s: %s", log_path ? log_path : "/dev/null", strerror(errno));
		if (env != environ)
			free(env);
		free(preload_storage);
		return -1;
	}
	/* Exec failure is reported through a close-on-exec pipe. */
	int report[2];
	if (pipe2(report, O_CLOEXEC) == -1) {
		snprintf(err, errlen, "pipe: %s", strerror(errno));
		close(out);
		return -1;
	}
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid == 0) {
		/* Only async-signal-safe calls from here to exec. */
		setpgid(0, 0); /* Ctrl-C reaches the launcher, which stops the broker in order */
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a killed test */
		if (getppid() != parent)
			_exit(127);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		for (int sig = 1; sig < NSIG; sig++)
			signal(sig, SIG_DFL);
		int devnull = open("/dev/null", O_RDONLY);
		if (devnull >= 0)
			dup2(devnull, STDIN_FILENO);
		dup2(out, STDOUT_FILENO);
		dup2(out, STDERR_FILENO);
		execve(argv[0], argv, env);
		int e = errno;
		ssize_t ignored = write(report[1], &e, sizeof e);
		(void)ignored;
		_exit(127);
	}
	int saved = errno;
	close(report[1]);
	close(out);
	if (env != environ)
		free(env);
	free(preload_storage);
	if (pid < 0) {
		close(report[0]);
		snprintf(err, errlen, "fork: %s", strerror(saved));
		return -1;
	}
	int exec_errno;
	ssize_t got;
	do
		got = read(report[0], &exec_errno, sizeof exec_errno);
	while (got == -1 && errno == EINTR);
	close(report[0]);
	if (got == (ssize_t)sizeof exec_errno) {
		waitpid(pid, NULL, 0);
		snprintf(err, errlen, "cannot execute %s: %s", argv[0], strerror(exec_errno));
		return -1;
	}
	return pid;
}

int tb__run(char *const argv[], const char *log_path, int timeout_ms, char *err, size_t errlen)
{
	pid_t pid = tb__spawn(argv, log_path, NULL, err, errlen);
	if (pid < 0)
		return -1;
	uint64_t deadline = mqc_now_ns() + (uint64_t)timeout_ms * MQC_NS_PER_MS;
	for (;;) {
		int status;
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid) {
			if (WIFEXITED(status))
				return WEXITSTATUS(status);
			snprintf(err, errlen, "%s was killed by signal %d", argv[0], WTERMSIG(status));
			return -1;
		}
		if (r == -1 && errno != EINTR) {
			snprintf(err, errlen, "waitpid: %s", strerror(errno));
			return -1;
		}
		if (mqc_now_ns() >= deadline) {
			tb__terminate(pid, 100);
			snprintf(err, errlen, "%s did not finish within %d ms", argv[0], timeout_ms);
			return -1;
		}
		sleep_ms(2);
	}
}

int tb__terminate(pid_t pid, int grace_ms)
{
	int status = 0;
	kill(pid, SIGCONT); /* a stopped broker cannot act on SIGTERM */
	kill(pid, SIGTERM);
	uint64_t deadline = mqc_now_ns() + (uint64_t)grace_ms * MQC_NS_PER_MS;
	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid || (r == -1 && errno == ECHILD))
			return status;
		if (mqc_now_ns() >= deadline)
			break;
		sleep_ms(5);
	}
	kill(pid, SIGKILL);
	while (waitpid(pid, &status, 0) == -1 && errno == EINTR)
		;
	return status;
}

static bool is_executable(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

static int search_dirs(const char *dirs, const char *name, char *out, size_t len)
{
	while (dirs && *dirs) {
		size_t n = strcspn(dirs, ":");
		if (n > 0 && (size_t)snprintf(out, len, "%.*s/%s", (int)n, dirs, name) < len
		    && is_executable(out))
			return 0;
		dirs += n;
		if (*dirs == ':')
			dirs++;
	}
	return -1;
}

int tb__find_program(const char *name, const char *extra_dirs, char *out, size_t len)
{
	if (strchr(name, '/')) {
		if (!is_executable(name) || (size_t)snprintf(out, len, "%s", name) >= len)
			return -1;
		return 0;
	}
	if (search_dirs(getenv("PATH"), name, out, len) == 0)
		return 0;
	return search_dirs(extra_dirs, name, out, len);
}

void tb__remove_tree(const char *path)
{
	/* The launcher's directory is flat: files only. */
	DIR *dir = opendir(path);
	if (dir) {
		struct dirent *entry;
		while ((entry = readdir(dir))) {
			if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0)
				continue;
			char file[TB_PATH_MAX + 256];
			snprintf(file, sizeof file, "%s/%s", path, entry->d_name);
			unlink(file);
		}
		closedir(dir);
	}
	rmdir(path);
}

static int bind_loopback(int port, int *out_port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); /* as mosquitto does */
	struct sockaddr_in addr = { .sin_family = AF_INET,
		.sin_port = htons((uint16_t)port),
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof addr;
	int rc = -1;
	if (bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0
	    && getsockname(fd, (struct sockaddr *)&addr, &alen) == 0) {
		*out_port = ntohs(addr.sin_port);
		rc = 0;
	}
	close(fd);
	return rc;
}

/* The lowest port the kernel hands out to outgoing connections (ip_local_port_range). */
static int ephemeral_low(void)
{
	int low = 32768, high;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
	if (f) {
		if (fscanf(f, "%d %d", &low, &high) != 2)
			low = 32768;
		fclose(f);
	}
	return low;
}

/*
 * A port below the ephemeral range, where no outgoing connection can take it between this check
 * and the listener's bind: a port bind(0) picks is an ephemeral one, and a test beside this one
 * that opens thousands of connections (mqbench's naive mode) can take it first, so the broker's
 * listener failed with "Address already in use" now and then. Random, so that parallel tests
 * rarely try the same one; never the probe's default; bind(0) if none of 200 is free.
 */
int tb__free_port(void)
{
	int low = ephemeral_low(), port;
	if (low > 10000 + 1000) {
		for (int attempt = 0; attempt < 200; attempt++) {
			unsigned r = 0;
			if (getrandom(&r, sizeof r, 0) != sizeof r)
				break;
			int candidate = 10000 + (int)(r % (unsigned)(low - 10000));
			if (candidate == 18830) /* the probe's default address: a test checks it */
				continue;
			if (bind_loopback(candidate, &port) == 0)
				return port;
		}
	}
	return bind_loopback(0, &port) == 0 ? port : -1;
}

bool tb__port_is_free(int port)
{
	int got;
	return bind_loopback(port, &got) == 0;
}

int tb__log_excerpt(const char *path, char *out, size_t len)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char line[512], last[512] = "", error[512] = "";
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\r\n")] = '\0';
		if (!line[0] || strcmp(line, "-----") == 0)
			continue;
		mqc_strlcpy(last, line, sizeof last);
		if (strstr(line, "rror") && !error[0])
			mqc_strlcpy(error, line, sizeof error);
	}
	fclose(f);
	const char *pick = error[0] ? error : last;
	if (!pick[0])
		return -1;
	mqc_strlcpy(out, pick, len);
	return error[0] ? 1 : 0;
}
