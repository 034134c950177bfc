/* This process's resources, for /metrics and /v1/status: resident memory,
 * CPU time, open file descriptors (Linux /proc; elsewhere the readers give
 * -1). The parsers take the files' text so that they can be tested. */
#ifndef IG_SERVER_PROC_H
#define IG_SERVER_PROC_H

#include <stddef.h>

/* Resident bytes from the text of /proc/self/statm (its second field, in
 * pages of page_size bytes), or -1 when the text is not two numbers. */
long long srv_proc_parse_statm(const char *text, long page_size);
/* The value of a "Key:  123 kB" line of /proc/self/status in bytes (key
 * without the colon, e.g. "VmHWM"), or -1 when absent or malformed. */
long long srv_proc_parse_status_kb(const char *text, const char *key);
/* Entries of a directory besides "." and "..", or -1 when it cannot be read. */
int srv_proc_count_dir(const char *path);

/* Resident set size of this process in bytes (/proc/self/statm), or -1. */
long long srv_process_rss_bytes(void);
/* Peak resident set size in bytes (getrusage), or -1. */
long long srv_process_peak_rss_bytes(void);
/* CPU time used by this process in seconds (all threads). */
double srv_process_cpu_seconds(void);
/* Open file descriptors (/proc/self/fd), or -1; and their limit
 * (RLIMIT_NOFILE's soft limit), or -1 when unlimited or unknown. */
int srv_process_open_fds(void);
long long srv_process_max_fds(void);

#endif
