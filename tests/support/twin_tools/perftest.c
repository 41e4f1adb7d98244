/* The twin's ib_write_bw (tests/support/twin.py): perftest's two sides, each answering with the
 * captured 25 Gb/s run (tests/fixtures/seed/ib_write_bw_{client,server}_roce_25g.txt), its device,
 * link type and figures made this twin's.
 *
 * The two sides meet over TCP on the `-p` port, as perftest's own out-of-band exchange does, so
 * that the gate's wait for the server to listen, its client dialling the server's address and its
 * timeouts all run for real. The bandwidth is the capture's share of its line rate (23.14 of 25
 * Gb/s) of the slower of the two ports' rates: 400 Gb/s (NDR), or what /etc/twin/rail-gbps gives
 * a device (the `slow_rail` fault).
 *
 * Why C: a diagnosis of 1,000 twins starts 8,000 servers and 8,000 clients at once (500 pairs,
 * 8 rails each). As Python programs they did not fit in two cores and 24 GiB; a program of its
 * own costs a few hundred KiB and a millisecond each. Installed as ib_write_bw, so the gate's
 * stray-server kill finds it by name.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CAPTURED_GBPS 23.14
#define CAPTURED_LINE_GBPS 25.0
#define LINE_GBPS 400.0
#define ACCEPT_TIMEOUT_MS 120000 /* no client: end as perftest's own server would, never hang */
#define CONNECT_FOR_S 10.0

struct run {
    const char *device, *address;
    int port;
    long size;
    double seconds;
};

static int valued(const char *word) {
    static const char *const names[] = {"-d", "-i", "-x", "-p", "-s", "-D", "-n", "-q", "-m", NULL};
    for (const char *const *name = names; *name; name++)
        if (strcmp(word, *name) == 0) return 1;
    return 0;
}

/* perftest's options as given; the server address when this is the client. */
static struct run options(int argc, char **argv) {
    struct run run = {"mlx5_0", NULL, 18515, 65536, 5.0};
    for (int i = 1; i < argc; i++) {
        const char *word = argv[i];
        if (valued(word)) {
            const char *value = i + 1 < argc ? argv[++i] : "";
            if (strcmp(word, "-d") == 0) run.device = value;
            else if (strcmp(word, "-p") == 0) run.port = atoi(value);
            else if (strcmp(word, "-s") == 0) run.size = atol(value);
            else if (strcmp(word, "-D") == 0) run.seconds = atof(value);
        } else if (word[0] != '-') {
            run.address = word;
        }
    }
    return run;
}

/* This port's rate: its line in /etc/twin/rail-gbps, else the NDR line rate. */
static double port_gbps(const char *device) {
    FILE *rates = fopen("/etc/twin/rail-gbps", "r");
    char name[256];
    double gbps, found = LINE_GBPS;
    if (!rates) return found;
    while (fscanf(rates, "%255s %lf", name, &gbps) == 2)
        if (strcmp(name, device) == 0) found = gbps;
    fclose(rates);
    return found;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void pause_for(double seconds) {
    struct timespec t = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    while (nanosleep(&t, &t) == -1 && errno == EINTR) continue;
}

/* Each side's port rate, a line each way: the server speaks first, as perftest's exchange does. */
static int exchange(int peer, double mine, double *theirs, int serving) {
    char out[64], in[64];
    int length = snprintf(out, sizeof out, "%.17g\n", mine);
    if (serving && write(peer, out, length) != length) return -1;
    size_t got = 0;
    while (got < sizeof in - 1) {
        ssize_t n = read(peer, in + got, 1);
        if (n <= 0) return -1;
        if (in[got++] == '\n') break;
    }
    in[got] = '\0';
    *theirs = atof(in);
    return serving || write(peer, out, length) == length ? 0 : -1;
}

static int serve(const struct run *run, double mine, double *theirs) {
    int one = 1, server = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_port = htons(run->port)};
    at.sin_addr.s_addr = htonl(INADDR_ANY);
    setsockopt(server, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(server, (struct sockaddr *)&at, sizeof at) || listen(server, 1)) {
        fprintf(stderr, " Couldn't listen to port %d: %s\n", run->port, strerror(errno));
        return -1;
    }
    struct pollfd wait = {server, POLLIN, 0};
    if (poll(&wait, 1, ACCEPT_TIMEOUT_MS) != 1) return -1;
    int peer = accept(server, NULL, NULL);
    int failed = peer < 0 || exchange(peer, mine, theirs, 1);
    close(server);
    if (peer >= 0) close(peer);
    return failed ? -1 : 0;
}

static int dial(const struct run *run, double mine, double *theirs) {
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_port = htons(run->port)};
    if (inet_pton(AF_INET, run->address, &at.sin_addr) != 1) {
        fprintf(stderr, " Couldn't connect to %s:%d\n", run->address, run->port);
        return -1;
    }
    double deadline = now() + CONNECT_FOR_S;
    for (;;) {
        int peer = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(peer, (struct sockaddr *)&at, sizeof at) == 0) {
            int failed = exchange(peer, mine, theirs, 0);
            close(peer);
            return failed ? -1 : 0;
        }
        close(peer);
        if (now() > deadline) {
            fprintf(stderr, " Couldn't connect to %s:%d\n", run->address, run->port);
            return -1;
        }
        pause_for(0.1);
    }
}

/* The captured side's output with this run's device, link type and figures. */
static int print_output(const char *side, const struct run *run, double gbps) {
    char path[64], line[1024];
    snprintf(path, sizeof path, "/etc/twin/ib_write_bw_%s.txt", side);
    FILE *capture = fopen(path, "r");
    if (!capture) return -1;
    const char *device_label = "Device         : ", *ethernet = "Link type       : Ethernet";
    while (fgets(line, sizeof line, capture)) {
        char *at;
        if (strncmp(line, " 65536 ", 7) == 0) {
            long long iterations = (long long)(gbps * 1e9 / 8 * run->seconds / run->size);
            printf(" %-10ld %-16lld 0.00%19.2f%20.6f\n", run->size, iterations, gbps,
                   gbps * 1e9 / 8 / run->size / 1e6);
        } else if ((at = strstr(line, device_label))) {
            at += strlen(device_label);
            printf("%.*s%s%s", (int)(at - line), line, run->device, at + strcspn(at, " \t\n"));
        } else if ((at = strstr(line, ethernet))) {
            printf("%.*sLink type       : IB%s", (int)(at - line), line, at + strlen(ethernet));
        } else {
            fputs(line, stdout);
        }
    }
    fclose(capture);
    return 0;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 0; /* no help text was captured: read as a perftest built without CUDA */
    struct run run = options(argc, argv);
    double mine = port_gbps(run.device), theirs;
    if ((run.address ? dial(&run, mine, &theirs) : serve(&run, mine, &theirs)) != 0) return 1;
    pause_for(run.seconds);
    double slower = mine < theirs ? mine : theirs;
    return print_output(run.address ? "client" : "server", &run, CAPTURED_GBPS / CAPTURED_LINE_GBPS * slower) ? 1 : 0;
}
