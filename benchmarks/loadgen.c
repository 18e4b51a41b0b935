/* A small closed-loop HTTP/1.1 load generator for benchmarks/bench_serving.py.
 *
 * Python clients (httpx, threads) cost more per request than the server under test, so on a 2-core machine
 * they measure themselves. This one is built by the benchmark with the machine's gcc:
 *
 *   loadgen HOST PORT SECONDS CONNECTIONS PATHS_FILE [once]
 *
 * Each connection is a thread with one keep-alive socket that sends a GET for the next path of PATHS_FILE
 * (one per line, already URL-encoded; each thread starts at its own offset) and waits for the whole answer
 * (Content-Length) before the next. With `once`, the connections share one pass over PATHS_FILE (every path
 * requested exactly once, or until SECONDS run out). Latency is time from send to the last body byte. Prints one JSON line:
 * requests, non-200 answers, errors, seconds, and p50/p90/p99/p999/max in microseconds.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *g_host;
static int g_port;
static double g_seconds;
static char **g_paths;
static size_t g_npaths;
static int g_once;
static size_t g_next; /* shared position in `once` mode */

typedef struct {
    int id;
    uint64_t *lat; /* microseconds */
    size_t n, cap;
    uint64_t non200, errors;
} worker_t;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int connect_to(void) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)g_port);
    if (inet_pton(AF_INET, g_host, &a.sin_addr) != 1) return -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const char *buf, size_t len) {
    while (len) {
        ssize_t w = send(fd, buf, len, MSG_NOSIGNAL);
        if (w <= 0) return -1;
        buf += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Reads one response; returns the status code, or -1 on error. */
static int read_response(int fd, char *buf, size_t cap) {
    size_t have = 0;
    char *hdr_end = NULL;
    while (!hdr_end) {
        if (have == cap) return -1;
        ssize_t r = recv(fd, buf + have, cap - have, 0);
        if (r <= 0) return -1;
        have += (size_t)r;
        hdr_end = memmem(buf, have, "\r\n\r\n", 4);
    }
    int status = atoi(buf + 9);
    long clen = -1;
    for (char *p = buf; p < hdr_end; p++) {
        if ((*p == '\n') && strncasecmp(p + 1, "content-length:", 15) == 0) {
            clen = strtol(p + 16, NULL, 10);
            break;
        }
    }
    if (clen < 0) return -1; /* the server under test always sends Content-Length */
    size_t body_have = have - (size_t)(hdr_end + 4 - buf);
    while ((long)body_have < clen) {
        ssize_t r = recv(fd, buf, cap, 0);
        if (r <= 0) return -1;
        body_have += (size_t)r;
    }
    return status;
}

static void *run(void *arg) {
    worker_t *w = arg;
    size_t bufcap = 1 << 22;
    char *buf = malloc(bufcap);
    char req[8192];
    int fd = connect_to();
    size_t i = ((size_t)w->id * 7919u) % g_npaths;
    double stop = now() + g_seconds;
    while (fd >= 0 && now() < stop) {
        if (g_once) {
            i = __atomic_fetch_add(&g_next, 1, __ATOMIC_RELAXED);
            if (i >= g_npaths) break;
        }
        int len = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s:%d\r\n\r\n", g_paths[i], g_host, g_port);
        i = (i + 1) % g_npaths;
        double t0 = now();
        if (send_all(fd, req, (size_t)len) != 0) {
            w->errors++;
            close(fd);
            fd = connect_to();
            continue;
        }
        int status = read_response(fd, buf, bufcap);
        double t1 = now();
        if (status < 0) {
            w->errors++;
            close(fd);
            fd = connect_to();
            continue;
        }
        if (status != 200) w->non200++;
        if (w->n == w->cap) {
            w->cap = w->cap ? w->cap * 2 : 65536;
            w->lat = realloc(w->lat, w->cap * sizeof *w->lat);
        }
        w->lat[w->n++] = (uint64_t)((t1 - t0) * 1e6);
    }
    if (fd >= 0) close(fd);
    free(buf);
    return NULL;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 6 && !(argc == 7 && strcmp(argv[6], "once") == 0)) {
        fprintf(stderr, "usage: %s HOST PORT SECONDS CONNECTIONS PATHS_FILE [once]\n", argv[0]);
        return 2;
    }
    g_once = argc == 7;
    g_host = argv[1];
    g_port = atoi(argv[2]);
    g_seconds = atof(argv[3]);
    int conns = atoi(argv[4]);
    FILE *f = fopen(argv[5], "r");
    if (!f || conns < 1) {
        fprintf(stderr, "loadgen: cannot read %s\n", argv[5]);
        return 2;
    }
    size_t cap = 1024;
    g_paths = malloc(cap * sizeof *g_paths);
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!*line) continue;
        if (g_npaths == cap) g_paths = realloc(g_paths, (cap *= 2) * sizeof *g_paths);
        g_paths[g_npaths++] = strdup(line);
    }
    fclose(f);
    if (!g_npaths) {
        fprintf(stderr, "loadgen: no paths in %s\n", argv[5]);
        return 2;
    }
    worker_t *ws = calloc((size_t)conns, sizeof *ws);
    pthread_t *ts = calloc((size_t)conns, sizeof *ts);
    double t0 = now();
    for (int i = 0; i < conns; i++) {
        ws[i].id = i;
        pthread_create(&ts[i], NULL, run, &ws[i]);
    }
    size_t total = 0;
    uint64_t non200 = 0, errors = 0;
    for (int i = 0; i < conns; i++) {
        pthread_join(ts[i], NULL);
        total += ws[i].n;
        non200 += ws[i].non200;
        errors += ws[i].errors;
    }
    double elapsed = now() - t0;
    uint64_t *all = malloc((total ? total : 1) * sizeof *all);
    size_t k = 0;
    for (int i = 0; i < conns; i++) {
        memcpy(all + k, ws[i].lat, ws[i].n * sizeof *all);
        k += ws[i].n;
    }
    qsort(all, total, sizeof *all, cmp_u64);
#define PCT(p) (total ? all[(size_t)((double)(total - 1) * (p))] : 0)
    printf("{\"requests\": %zu, \"non_200\": %llu, \"errors\": %llu, \"seconds\": %.3f, \"req_per_s\": %.1f, "
           "\"p50_us\": %llu, \"p90_us\": %llu, \"p99_us\": %llu, \"p999_us\": %llu, \"max_us\": %llu}\n",
           total, (unsigned long long)non200, (unsigned long long)errors, elapsed, total / elapsed,
           (unsigned long long)PCT(0.50), (unsigned long long)PCT(0.90), (unsigned long long)PCT(0.99),
           (unsigned long long)PCT(0.999), (unsigned long long)(total ? all[total - 1] : 0));
    return 0;
}
