#define _GNU_SOURCE
#include "server/proc.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* One unsigned decimal number at *p (leading blanks skipped); false on
 * anything else or overflow. */
static bool parse_u64(const char **p, unsigned long long *out) {
    const char *s = *p;
    while (*s == ' ' || *s == '\t') s++;
    if (*s < '0' || *s > '9') return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE) return false;
    *out = v;
    *p = end;
    return true;
}

long long srv_proc_parse_statm(const char *text, long page_size) {
    if (!text || page_size <= 0) return -1;
    unsigned long long size, rss;
    const char *p = text;
    if (!parse_u64(&p, &size) || !parse_u64(&p, &rss)) return -1;
    if (rss > (unsigned long long)(LLONG_MAX / page_size)) return -1;
    return (long long)rss * page_size;
}

long long srv_proc_parse_status_kb(const char *text, const char *key) {
    if (!text || !key || !*key) return -1;
    size_t kl = strlen(key);
    for (const char *line = text; line && *line;) {
        if (!strncmp(line, key, kl) && line[kl] == ':') {
            const char *p = line + kl + 1;
            unsigned long long kb;
            if (!parse_u64(&p, &kb)) return -1;
            while (*p == ' ' || *p == '\t') p++;
            if (strncmp(p, "kB", 2) || kb > (unsigned long long)(LLONG_MAX / 1024)) return -1;
            return (long long)kb * 1024;
        }
        line = strchr(line, '\n');
        if (line) line++;
    }
    return -1;
}

int srv_proc_count_dir(const char *path) {
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

long long srv_process_rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    char buf[256];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    long page = sysconf(_SC_PAGESIZE);
    return srv_proc_parse_statm(buf, page > 0 ? page : 4096);
}

long long srv_process_peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0 || ru.ru_maxrss < 0) return -1;
    return (long long)ru.ru_maxrss * 1024; /* kilobytes on Linux */
}

double srv_process_cpu_seconds(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int srv_process_open_fds(void) {
    int n = srv_proc_count_dir("/proc/self/fd");
    return n > 0 ? n - 1 : n; /* less the descriptor that reads the directory */
}

long long srv_process_max_fds(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return -1;
    return rl.rlim_cur > (rlim_t)LLONG_MAX ? -1 : (long long)rl.rlim_cur;
}
