// delayswitch: a learning Ethernet switch over TAP devices that delays every frame, for the
// emulated cluster of bench/scaling/cluster.sh (issue 14) on kernels without sch_netem.
//
// One TAP device per port (IFF_TAP | IFF_NO_PI, created by this process, so the devices vanish
// when it exits, however it exits). `--port NAME=NETNS` moves port NAME's interface into the
// network namespace bound at the file NETNS (e.g. /run/netns/foo, via RTM_NEWLINK with
// IFLA_NET_NS_FD); the descriptor stays with the switch, so the host's interface is one end of a
// point-to-point link whose other end is this process.
//
// Forwarding: IEEE 802.1D transparent bridging without spanning tree: the source MAC of every
// frame is learnt (MAC -> ingress port); a frame to a learnt unicast MAC goes to that port (and
// is dropped if that is the ingress port), any other frame (broadcast, multicast, unknown
// unicast) is flooded to every other port.
//
// Timing, per output port: a FIFO that models the port's transmitter and the wire behind it.
// The transmitter is a token-bucket shaper at RATE with a bucket of --burst-bytes (tc tbf's
// rate / burst), written as the GCRA virtual-scheduling recurrence (ITU-T I.371): with TAT the
// theoretical finish time of the port's previous frame, a frame of L bytes arriving at time t
// gets X = max(TAT, t), TAT = X + L * 8 / RATE, and leaves the transmitter at
// d = max(t, TAT - BURST * 8 / RATE) (BURST 0: plain serialization; RATE 0: d = t). It is
// written to the output TAP at d + DELAY: one hop adds DELAY of propagation delay, a port fed
// faster than RATE queues (like a switch buffer), and the burst absorbs the bunching of frames
// read late when this process was not scheduled for a while. Bounded: a frame that would wait
// more than --queue-us for the transmitter, or that would make the port's queued bytes exceed
// --queue-bytes, is dropped and counted (a tail drop, which TCP reacts to).
//
// Event loop: ppoll(2) over the TAP descriptors with a nanosecond timeout until the earliest
// due frame; SIGTERM / SIGINT (blocked except inside ppoll, so never lost) end the loop cleanly,
// SIGUSR1 prints the counters. Counters and CPU time (getrusage) are printed on exit.
//
// Usage: delayswitch [--delay-us US] [--rate BITS] [--burst-bytes B] [--queue-us US]
//                    [--queue-bytes B] [--exit-with-parent] --port NAME[=NETNS_FILE] [--port ...]
//   RATE: bit/s, with an optional suffix as tc writes it (kbit, mbit, gbit), 0 = unlimited.
//   Prints "delayswitch: ready ..." on stdout once every port exists (and has moved).
// Needs CAP_NET_ADMIN and /dev/net/tun. Exit status: 0 after SIGTERM / SIGINT, 1 on a set-up
// error, 2 on a usage error.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE // ppoll
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <net/if.h> // before the linux/ headers: struct ifreq from glibc
#include <linux/if_tun.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_PORTS 64
#define MAX_MACS 1024
#define FRAME_MAX 65536 + 64 // the TAP MTU is at most 65521 (+ 14 header bytes)
#define READ_BURST 64        // frames read from one port before serving the others

typedef struct frame {
    struct frame *next;
    int64_t due_ns; // CLOCK_MONOTONIC time at which it is written to the output port
    uint32_t len;
    unsigned char data[];
} frame;

typedef struct {
    char name[IFNAMSIZ];
    int fd;
    frame *head, *tail;
    size_t q_bytes;
    int64_t tat_ns; // GCRA theoretical finish time of the last frame accepted
    uint64_t rx_frames, rx_bytes, tx_frames, tx_bytes, drops, tx_errors;
    int64_t late_sum_ns, late_max_ns; // how long after its due time a frame was written
} port;

typedef struct {
    unsigned char mac[6];
    int port;
} mac_entry;

static port ports[MAX_PORTS];
static int n_ports;
static mac_entry macs[MAX_MACS];
static int n_macs;
static int64_t delay_ns, queue_ns = 20000000, rate_bps, burst_bytes;
static size_t queue_bytes = 64u << 20;
static uint64_t floods, unlearnt;
static volatile sig_atomic_t stop_sig, stats_sig;

static void on_signal(int s) {
    if (s == SIGUSR1)
        stats_sig = 1;
    else
        stop_sig = s;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int tap_open(const char *name) {
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "delayswitch: /dev/net/tun: %s\n", strerror(errno));
        return -1;
    }
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    memcpy(ifr.ifr_name, name, strnlen(name, IFNAMSIZ - 1)); // names are < IFNAMSIZ (main)
    if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
        fprintf(stderr, "delayswitch: cannot create TAP %s: %s\n", name, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

// Moves interface `name` into the network namespace bound at `ns_path` (rtnetlink RTM_NEWLINK
// with IFLA_NET_NS_FD, what `ip link set NAME netns NS` sends). 0 or -1 (message printed).
static int move_to_netns(const char *name, const char *ns_path) {
    unsigned idx = if_nametoindex(name);
    if (idx == 0) {
        fprintf(stderr, "delayswitch: no interface %s: %s\n", name, strerror(errno));
        return -1;
    }
    int nsfd = open(ns_path, O_RDONLY | O_CLOEXEC);
    if (nsfd < 0) {
        fprintf(stderr, "delayswitch: network namespace %s: %s\n", ns_path, strerror(errno));
        return -1;
    }
    int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (s < 0) {
        fprintf(stderr, "delayswitch: netlink socket: %s\n", strerror(errno));
        close(nsfd);
        return -1;
    }
    struct {
        struct nlmsghdr nh;
        struct ifinfomsg ifi;
        char attrs[64];
    } req;
    memset(&req, 0, sizeof req);
    req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
    req.nh.nlmsg_type = RTM_NEWLINK;
    req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
    req.nh.nlmsg_seq = 1;
    req.ifi.ifi_family = AF_UNSPEC;
    req.ifi.ifi_index = (int)idx;
    struct rtattr *rta = (struct rtattr *)((char *)&req + NLMSG_ALIGN(req.nh.nlmsg_len));
    uint32_t fd32 = (uint32_t)nsfd;
    rta->rta_type = IFLA_NET_NS_FD;
    rta->rta_len = RTA_LENGTH(sizeof fd32);
    memcpy(RTA_DATA(rta), &fd32, sizeof fd32);
    req.nh.nlmsg_len = NLMSG_ALIGN(req.nh.nlmsg_len) + RTA_ALIGN(rta->rta_len);
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    int rc = -1;
    if (sendto(s, &req, req.nh.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0) {
        fprintf(stderr, "delayswitch: netlink send: %s\n", strerror(errno));
    } else {
        char buf[4096];
        ssize_t n = recv(s, buf, sizeof buf, 0);
        struct nlmsghdr *h = (struct nlmsghdr *)buf;
        if (n < (ssize_t)NLMSG_LENGTH(sizeof(struct nlmsgerr)) || h->nlmsg_type != NLMSG_ERROR)
            fprintf(stderr, "delayswitch: moving %s: unexpected netlink answer\n", name);
        else {
            int err = ((struct nlmsgerr *)NLMSG_DATA(h))->error;
            if (err == 0)
                rc = 0;
            else
                fprintf(stderr, "delayswitch: moving %s into %s: %s\n", name, ns_path,
                        strerror(-err));
        }
    }
    close(s);
    close(nsfd);
    return rc;
}

static int mac_lookup(const unsigned char *mac) {
    for (int i = 0; i < n_macs; i++)
        if (memcmp(macs[i].mac, mac, 6) == 0) return i;
    return -1;
}

static void mac_learn(const unsigned char *mac, int p) {
    if (mac[0] & 1) return; // a multicast source address is invalid: never learnt
    int i = mac_lookup(mac);
    if (i >= 0) {
        macs[i].port = p; // a station that moved
    } else if (n_macs < MAX_MACS) {
        memcpy(macs[n_macs].mac, mac, 6);
        macs[n_macs++].port = p;
    } else {
        unlearnt++; // table full: its frames keep being flooded
    }
}

// Queues a copy of the frame on output port `o` (or drops it, counted).
static void enqueue(int o, const unsigned char *data, uint32_t len, int64_t t) {
    port *p = &ports[o];
    int64_t x = p->tat_ns > t ? p->tat_ns : t, tat = x, d = t;
    if (rate_bps > 0) {
        tat = x + (int64_t)((double)len * 8e9 / (double)rate_bps);
        int64_t early = tat - (int64_t)((double)burst_bytes * 8e9 / (double)rate_bps);
        if (early > d) d = early;
    }
    if (d - t > queue_ns || p->q_bytes + len > queue_bytes) {
        p->drops++;
        return;
    }
    frame *f = malloc(sizeof *f + len);
    if (!f) {
        p->drops++;
        return;
    }
    p->tat_ns = tat;
    f->due_ns = d + delay_ns;
    f->len = len;
    f->next = NULL;
    memcpy(f->data, data, len);
    if (p->tail)
        p->tail->next = f;
    else
        p->head = f;
    p->tail = f;
    p->q_bytes += len;
}

static void switch_frame(int in, const unsigned char *data, uint32_t len, int64_t t) {
    ports[in].rx_frames++;
    ports[in].rx_bytes += len;
    if (len < 14) return; // a runt: no Ethernet header
    mac_learn(data + 6, in);
    int i = (data[0] & 1) ? -1 : mac_lookup(data);
    if (i >= 0) {
        if (macs[i].port != in) enqueue(macs[i].port, data, len, t);
        return;
    }
    floods++;
    for (int o = 0; o < n_ports; o++)
        if (o != in) enqueue(o, data, len, t);
}

// Writes every frame of port `o` that is due by `t`.
static void deliver(int o, int64_t t) {
    port *p = &ports[o];
    while (p->head && p->head->due_ns <= t) {
        frame *f = p->head;
        int64_t late = now_ns() - f->due_ns;
        p->late_sum_ns += late;
        if (late > p->late_max_ns) p->late_max_ns = late;
        if (write(p->fd, f->data, f->len) == (ssize_t)f->len) {
            p->tx_frames++;
            p->tx_bytes += f->len;
        } else {
            p->tx_errors++; // e.g. the host's interface is down
        }
        p->head = f->next;
        if (!p->head) p->tail = NULL;
        p->q_bytes -= f->len;
        free(f);
    }
}

static void print_stats(const char *when) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(stderr,
            "delayswitch: %s: cpu user %.3f s sys %.3f s, flooded %" PRIu64
            " frames, unlearnt %" PRIu64 "\n",
            when, (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6,
            (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6, floods, unlearnt);
    for (int i = 0; i < n_ports; i++) {
        port *p = &ports[i];
        fprintf(stderr,
                "delayswitch:   port %s: rx %" PRIu64 " frames %" PRIu64 " bytes, tx %" PRIu64
                " frames %" PRIu64 " bytes, dropped %" PRIu64 ", write errors %" PRIu64
                ", late mean %.0f us max %.0f us\n",
                p->name, p->rx_frames, p->rx_bytes, p->tx_frames, p->tx_bytes, p->drops,
                p->tx_errors,
                p->tx_frames + p->tx_errors
                    ? (double)p->late_sum_ns / 1e3 / (double)(p->tx_frames + p->tx_errors)
                    : 0.0,
                (double)p->late_max_ns / 1e3);
    }
}

// A non-negative integer with an optional unit suffix (units: {suffix, multiplier}, NULL-ended);
// -1 when malformed.
static int64_t parse_num(const char *s, const char *const *suffixes, const double *mult) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0) return -1;
    double m = 1;
    if (*end) {
        int k = 0;
        while (suffixes[k] && strcmp(end, suffixes[k]) != 0)
            k++;
        if (!suffixes[k]) return -1;
        m = mult[k];
    }
    if (v * m > 9e18) return -1;
    return (int64_t)(v * m + 0.5);
}

static void usage(void) {
    fprintf(stderr, "usage: delayswitch [--delay-us US] [--rate BITS[kbit|mbit|gbit]] "
                    "[--burst-bytes B] [--queue-us US] [--queue-bytes B] [--exit-with-parent] "
                    "--port NAME[=NETNS_FILE] [--port ...]\n");
}

int main(int argc, char **argv) {
    static const char *const rate_sfx[] = {"bit", "kbit", "mbit", "gbit", NULL};
    static const double rate_mul[] = {1, 1e3, 1e6, 1e9};
    static const char *const none_sfx[] = {NULL};
    static const double none_mul[] = {1};
    const char *netns[MAX_PORTS] = {0};
    int with_parent = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x = 0;
        if (strcmp(a, "--exit-with-parent") == 0) {
            with_parent = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "delayswitch: %s needs a value\n", a);
            usage();
            return 2;
        }
        i++;
        if (strcmp(a, "--delay-us") == 0 && (x = parse_num(v, none_sfx, none_mul)) >= 0)
            delay_ns = x * 1000;
        else if (strcmp(a, "--queue-us") == 0 && (x = parse_num(v, none_sfx, none_mul)) >= 0)
            queue_ns = x * 1000;
        else if (strcmp(a, "--queue-bytes") == 0 && (x = parse_num(v, none_sfx, none_mul)) > 0)
            queue_bytes = (size_t)x;
        else if (strcmp(a, "--burst-bytes") == 0 && (x = parse_num(v, none_sfx, none_mul)) >= 0)
            burst_bytes = x;
        else if (strcmp(a, "--rate") == 0 && (x = parse_num(v, rate_sfx, rate_mul)) >= 0)
            rate_bps = x;
        else if (strcmp(a, "--port") == 0) {
            if (n_ports == MAX_PORTS) {
                fprintf(stderr, "delayswitch: at most %d ports\n", MAX_PORTS);
                return 2;
            }
            const char *eq = strchr(v, '=');
            size_t nl = eq ? (size_t)(eq - v) : strlen(v);
            if (nl == 0 || nl >= IFNAMSIZ) {
                fprintf(stderr, "delayswitch: --port %s: interface name of 1..%d characters\n", v,
                        IFNAMSIZ - 1);
                return 2;
            }
            memcpy(ports[n_ports].name, v, nl);
            ports[n_ports].name[nl] = 0;
            ports[n_ports].fd = -1;
            netns[n_ports++] = eq ? eq + 1 : NULL;
        } else {
            fprintf(stderr, "delayswitch: bad option or value: %s %s\n", a, v);
            usage();
            return 2;
        }
    }
    if (n_ports < 1) {
        fprintf(stderr, "delayswitch: needs at least one --port\n");
        usage();
        return 2;
    }
    // Signals are blocked except inside ppoll: one arriving between two checks is not lost.
    sigset_t block, during_poll;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGHUP);
    sigaddset(&block, SIGUSR1);
    sigprocmask(SIG_BLOCK, &block, &during_poll);
    sigdelset(&during_poll, SIGTERM);
    sigdelset(&during_poll, SIGINT);
    sigdelset(&during_poll, SIGHUP);
    sigdelset(&during_poll, SIGUSR1);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (with_parent) {
        // The script that started us may die without its trap (SIGKILL): then so do we, and
        // our TAP devices with us.
        pid_t parent = getppid();
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) return 0;
    }
    prctl(PR_SET_TIMERSLACK, 1UL); // wake-ups within ~1 us of a frame's due time
    int rc = 0;
    for (int i = 0; i < n_ports && rc == 0; i++) {
        ports[i].fd = tap_open(ports[i].name);
        if (ports[i].fd < 0 || (netns[i] && move_to_netns(ports[i].name, netns[i]) != 0)) rc = 1;
    }
    struct pollfd pfd[MAX_PORTS];
    if (rc == 0) {
        printf("delayswitch: ready (%d ports, delay %" PRId64 " us, rate %" PRId64
               " bit/s, burst %" PRId64 " bytes, queue %" PRId64 " us / %zu bytes per port)\n",
               n_ports, delay_ns / 1000, rate_bps, burst_bytes, queue_ns / 1000, queue_bytes);
        fflush(stdout);
        for (int i = 0; i < n_ports; i++)
            pfd[i] = (struct pollfd){.fd = ports[i].fd, .events = POLLIN};
    }
    static unsigned char buf[FRAME_MAX];
    while (rc == 0 && !stop_sig) {
        int64_t t = now_ns(), next = INT64_MAX;
        for (int o = 0; o < n_ports; o++) {
            deliver(o, t);
            if (ports[o].head && ports[o].head->due_ns < next) next = ports[o].head->due_ns;
        }
        struct timespec ts, *tsp = NULL;
        if (next != INT64_MAX) {
            int64_t w = next - now_ns();
            if (w < 0) w = 0;
            ts.tv_sec = w / 1000000000;
            ts.tv_nsec = w % 1000000000;
            tsp = &ts;
        }
        int n = ppoll(pfd, (nfds_t)n_ports, tsp, &during_poll);
        if (stats_sig) {
            stats_sig = 0;
            print_stats("now");
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            fprintf(stderr, "delayswitch: ppoll: %s\n", strerror(errno));
            rc = 1;
            break;
        }
        for (int i = 0; i < n_ports && n > 0; i++) {
            if (pfd[i].revents & (POLLERR | POLLNVAL)) {
                fprintf(stderr, "delayswitch: port %s: descriptor error\n", ports[i].name);
                rc = 1;
                break;
            }
            if (!(pfd[i].revents & POLLIN)) continue;
            for (int k = 0; k < READ_BURST; k++) {
                ssize_t len = read(ports[i].fd, buf, sizeof buf);
                if (len <= 0) break; // EAGAIN: drained
                switch_frame(i, buf, (uint32_t)len, now_ns());
            }
        }
    }
    print_stats(stop_sig ? "exit" : "error exit");
    for (int i = 0; i < n_ports; i++) {
        while (ports[i].head) {
            frame *f = ports[i].head;
            ports[i].head = f->next;
            free(f);
        }
        if (ports[i].fd >= 0) close(ports[i].fd);
    }
    return rc;
}
