// A link delay for the namespace tests on kernels without tc's netem qdisc.
//
//   accl_nfq_delay QUEUE DELAY_MS
//
// Takes the packets that an iptables NFQUEUE rule sends to queue QUEUE (run it
// inside the namespace whose rule it serves) and lets each go DELAY_MS
// milliseconds after it arrived, in arrival order. The packets themselves are
// not copied to user space, only their ids. Prints "nfq_delay: ready" once the
// queue is bound, and "nfq_delay: N packets delayed, M dropped" at SIGTERM or
// SIGINT. Packets it cannot hold (the queue is full) are dropped by the kernel,
// as a real link's full buffer would.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CAPACITY (1u << 16)

static uint32_t ids[CAPACITY];
static uint64_t due[CAPACITY];
static unsigned head, tail;  // pending packets: [head, tail) modulo CAPACITY
static uint64_t delayNs, delayed, dropped;
static volatile sig_atomic_t stop;

static uint64_t now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int onPacket(struct nfq_q_handle* q, struct nfgenmsg* msg, struct nfq_data* nfa, void* arg) {
  (void)msg;
  (void)arg;
  struct nfqnl_msg_packet_hdr* h = nfq_get_msg_packet_hdr(nfa);
  if (!h) return 0;
  uint32_t id = ntohl(h->packet_id);
  if (tail - head == CAPACITY) {  // cannot hold it: the link's buffer is full
    ++dropped;
    return nfq_set_verdict(q, id, NF_DROP, 0, NULL);
  }
  ids[tail % CAPACITY] = id;
  due[tail % CAPACITY] = now() + delayNs;
  ++tail;
  return 0;
}

static void onSignal(int sig) {
  (void)sig;
  stop = 1;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: accl_nfq_delay QUEUE DELAY_MS\n");
    return 2;
  }
  char* end;
  long queue = strtol(argv[1], &end, 10);
  if (*end || queue < 0 || queue > 65535) {
    fprintf(stderr, "nfq_delay: QUEUE must be 0..65535, not '%s'\n", argv[1]);
    return 2;
  }
  double ms = strtod(argv[2], &end);
  if (*end || ms < 0 || ms > 10000) {
    fprintf(stderr, "nfq_delay: DELAY_MS must be 0..10000, not '%s'\n", argv[2]);
    return 2;
  }
  delayNs = (uint64_t)(ms * 1e6);

  struct nfq_handle* h = nfq_open();
  if (!h) {
    perror("nfq_delay: nfq_open");
    return 1;
  }
  struct nfq_q_handle* q = nfq_create_queue(h, (uint16_t)queue, onPacket, NULL);
  if (!q) {
    perror("nfq_delay: nfq_create_queue");
    return 1;
  }
  if (nfq_set_mode(q, NFQNL_COPY_META, 0) < 0 || nfq_set_queue_maxlen(q, CAPACITY) < 0) {
    perror("nfq_delay: configuring the queue");
    return 1;
  }
  int fd = nfq_fd(h);
  int rcvbuf = 8 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = onSignal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  printf("nfq_delay: ready (queue %ld, %.3f ms)\n", queue, ms);
  fflush(stdout);

  char buf[4096] __attribute__((aligned));
  while (!stop) {
    // To the nanosecond (ppoll): poll's whole milliseconds would turn a
    // 0.1 ms delay into 1 ms.
    struct timespec ts, *tsp = NULL;
    if (tail != head) {
      uint64_t t = now(), d = due[head % CAPACITY], w = d <= t ? 0 : d - t;
      ts.tv_sec = (time_t)(w / 1000000000u);
      ts.tv_nsec = (long)(w % 1000000000u);
      tsp = &ts;
    }
    struct pollfd p = {fd, POLLIN, 0};
    int n = ppoll(&p, 1, tsp, NULL);
    if (n < 0 && errno != EINTR) {
      perror("nfq_delay: poll");
      return 1;
    }
    if (n > 0 && (p.revents & POLLIN)) {
      for (;;) {  // drain what is there
        ssize_t len = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (len < 0) {
          if (errno == ENOBUFS) continue;  // the kernel dropped queue messages: go on
          break;
        }
        nfq_handle_packet(h, buf, (int)len);
      }
    }
    // Every packet now due in one verdict: the kernel numbers a queue's
    // packets in arrival order, and a batch verdict accepts all it holds up
    // to the id given. One message per packet capped the link at about 0.08
    // GB/s here (two hosts, two ranks, two cores), whatever tbf allowed.
    uint64_t t = now();
    unsigned last = head;
    while (last != tail && due[last % CAPACITY] <= t) ++last;
    if (last != head) {
      uint32_t first = ids[head % CAPACITY], upTo = ids[(last - 1) % CAPACITY];
      if (upTo - first == last - 1 - head) {  // consecutive ids: no wrap-around, no gap
        nfq_set_verdict_batch(q, upTo, NF_ACCEPT);
      } else {
        for (unsigned i = head; i != last; ++i) nfq_set_verdict(q, ids[i % CAPACITY], NF_ACCEPT, 0, NULL);
      }
      delayed += last - head;
      head = last;
    }
  }
  while (tail != head) nfq_set_verdict(q, ids[head++ % CAPACITY], NF_ACCEPT, 0, NULL);  // release the rest
  printf("nfq_delay: %llu packets delayed, %llu dropped\n", (unsigned long long)delayed,
         (unsigned long long)dropped);
  nfq_destroy_queue(q);
  nfq_close(h);
  return 0;
}
