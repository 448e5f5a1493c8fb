/* delayline: a wire with propagation delay and random loss, for the lab's namespaces.
 *
 * This kernel has no netem (and no fq for EDT tricks), so paths in the lab had no
 * propagation delay. delayline bridges two interfaces of a namespace of its own at layer 2:
 * every Ethernet frame that arrives on one leaves the other `delay` microseconds later,
 * unless the loss draw drops it. One constant delay per direction keeps frames in order,
 * as on a real wire. Offloads (TSO/GSO/checksum) must be off on the veths that feed it, so
 * that each frame is one wire packet with a complete checksum (topology.py does that).
 *
 *   delayline IF_A IF_B DELAY_US [LOSS_PPM [SEED [LIMIT_FRAMES]]]
 *
 * SIGTERM/SIGINT: prints its counters on stderr and exits 0. SIGUSR1: prints them.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

#define SLOT 2048          /* one frame: MTU 1500 + headers, with room to spare */
#define RECV_BATCH 512     /* frames read per wake-up before sending what is due */

struct frame {
    uint64_t due_ns;
    uint32_t len;
    unsigned char data[SLOT];
};

struct line {              /* one direction: a FIFO of frames in flight */
    const char *name;
    int in_fd, out_fd;
    struct frame *ring;
    size_t cap, head, count;
    uint64_t passed, lost, overflow, truncated, send_errors;
};

static volatile sig_atomic_t stop_flag = 0, report_flag = 0;
static uint64_t rng_state;

static void on_stop(int sig) { (void)sig; stop_flag = 1; }
static void on_report(int sig) { (void)sig; report_flag = 1; }

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t next_random(void) { /* xorshift64*: enough for loss draws */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

static int open_port(const char *ifname) {
    unsigned int index = if_nametoindex(ifname);
    if (index == 0) {
        fprintf(stderr, "delayline: no interface %s: %s\n", ifname, strerror(errno));
        exit(2);
    }
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL));
    if (fd < 0) {
        perror("delayline: socket(AF_PACKET)");
        exit(2);
    }
    int one = 1, big = 16 << 20;
    /* our own sends on this port must not come back as arrivals */
    if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) < 0) {
        perror("delayline: PACKET_IGNORE_OUTGOING");
        exit(2);
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big);
    struct sockaddr_ll addr = {0};
    addr.sll_family = AF_PACKET;
    addr.sll_protocol = htons(ETH_P_ALL);
    addr.sll_ifindex = (int)index;
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        fprintf(stderr, "delayline: bind %s: %s\n", ifname, strerror(errno));
        exit(2);
    }
    return fd;
}

static void report(const struct line *lines) {
    for (int i = 0; i < 2; i++) {
        const struct line *l = &lines[i];
        fprintf(stderr,
                "delayline %s: passed %llu lost %llu overflow %llu truncated %llu "
                "send_errors %llu in_flight %zu\n",
                l->name, (unsigned long long)l->passed, (unsigned long long)l->lost,
                (unsigned long long)l->overflow, (unsigned long long)l->truncated,
                (unsigned long long)l->send_errors, l->count);
    }
    fflush(stderr);
}

/* Read what has arrived on the line's input; queue it, stamped with its departure time. */
static void take_arrivals(struct line *l, uint64_t delay_ns, uint64_t loss_threshold) {
    for (int n = 0; n < RECV_BATCH; n++) {
        struct frame *slot = &l->ring[(l->head + l->count) % l->cap];
        unsigned char spill[SLOT];
        unsigned char *buf = l->count < l->cap ? slot->data : spill;
        ssize_t got = recv(l->in_fd, buf, SLOT, MSG_TRUNC);
        if (got < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return;
            perror("delayline: recv");
            exit(3);
        }
        if (got > SLOT) { /* an offload left on: a frame bigger than a packet */
            l->truncated++;
            continue;
        }
        if (loss_threshold && next_random() < loss_threshold) {
            l->lost++;
            continue;
        }
        if (l->count == l->cap) {
            l->overflow++;
            continue;
        }
        slot->due_ns = now_ns() + delay_ns;
        slot->len = (uint32_t)got;
        l->count++;
    }
}

/* Send every frame whose time has come; stop early if the output is full. */
static int send_due(struct line *l, uint64_t now) {
    while (l->count) {
        struct frame *f = &l->ring[l->head];
        if (f->due_ns > now)
            return 0;
        if (send(l->out_fd, f->data, f->len, MSG_DONTWAIT) < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
                return 1; /* retry when writable */
            if (errno != EINTR)
                l->send_errors++; /* e.g. the far side is down: the frame is lost */
            else
                continue;
        } else {
            l->passed++;
        }
        l->head = (l->head + 1) % l->cap;
        l->count--;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4 || argc > 7) {
        fprintf(stderr, "usage: delayline IF_A IF_B DELAY_US [LOSS_PPM [SEED [LIMIT_FRAMES]]]\n");
        return 2;
    }
    uint64_t delay_ns = strtoull(argv[3], NULL, 10) * 1000ull;
    uint64_t loss_ppm = argc > 4 ? strtoull(argv[4], NULL, 10) : 0;
    rng_state = argc > 5 ? strtoull(argv[5], NULL, 10) : 0;
    if (rng_state == 0)
        rng_state = 0x9E3779B97F4A7C15ull;
    size_t limit = argc > 6 ? strtoull(argv[6], NULL, 10) : 20000;
    if (loss_ppm > 1000000 || limit == 0) {
        fprintf(stderr, "delayline: LOSS_PPM must be 0..1000000 and LIMIT_FRAMES > 0\n");
        return 2;
    }
    /* draw < threshold drops: threshold = ppm/1e6 of the 64-bit range */
    uint64_t loss_threshold = loss_ppm == 0 ? 0 : (uint64_t)((long double)loss_ppm / 1e6L *
                                                              18446744073709551615.0L);

    int a = open_port(argv[1]), b = open_port(argv[2]);
    struct line lines[2] = {
        {.name = "a->b", .in_fd = a, .out_fd = b},
        {.name = "b->a", .in_fd = b, .out_fd = a},
    };
    for (int i = 0; i < 2; i++) {
        lines[i].cap = limit;
        /* untouched pages of the ring cost no memory */
        lines[i].ring = malloc(limit * sizeof(struct frame));
        if (!lines[i].ring) {
            fprintf(stderr, "delayline: cannot allocate %zu frames\n", limit);
            return 2;
        }
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_stop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_report;
    sigaction(SIGUSR1, &sa, NULL);
    fprintf(stderr, "delayline: %s <-> %s, %llu us each way, loss %llu ppm\n", argv[1], argv[2],
            (unsigned long long)(delay_ns / 1000), (unsigned long long)loss_ppm);
    fflush(stderr);

    while (!stop_flag) {
        if (report_flag) {
            report_flag = 0;
            report(lines);
        }
        uint64_t now = now_ns();
        int blocked[2];
        for (int i = 0; i < 2; i++)
            blocked[i] = send_due(&lines[i], now);
        struct pollfd fds[2] = {{.fd = a, .events = POLLIN}, {.fd = b, .events = POLLIN}};
        /* line 0 writes to b, line 1 to a */
        if (blocked[0])
            fds[1].events |= POLLOUT;
        if (blocked[1])
            fds[0].events |= POLLOUT;
        struct timespec timeout, *tp = NULL;
        uint64_t next = UINT64_MAX;
        for (int i = 0; i < 2; i++)
            if (lines[i].count && !blocked[i] && lines[i].ring[lines[i].head].due_ns < next)
                next = lines[i].ring[lines[i].head].due_ns;
        if (next != UINT64_MAX) {
            uint64_t wait = next > now ? next - now : 0;
            timeout.tv_sec = (time_t)(wait / 1000000000ull);
            timeout.tv_nsec = (long)(wait % 1000000000ull);
            tp = &timeout;
        }
        if (ppoll(fds, 2, tp, NULL) < 0 && errno != EINTR) {
            perror("delayline: ppoll");
            return 3;
        }
        if (fds[0].revents & POLLIN)
            take_arrivals(&lines[0], delay_ns, loss_threshold);
        if (fds[1].revents & POLLIN)
            take_arrivals(&lines[1], delay_ns, loss_threshold);
    }
    report(lines);
    return 0;
}
