/*
 * The floor of an nf_tables apply: the smallest program that does what
 * meshnft's ADD (or DEL) does to the kernel, and nothing else.
 *
 *   floor NETNS BATCH
 *
 * Enters the network namespace NETNS (a file such as /run/netns/x), opens a
 * NETLINK_NETFILTER socket there with SO_SNDBUFFORCE/SO_RCVBUFFORCE, sends
 * the netlink batch in the file BATCH (BATCH_BEGIN ... BATCH_END, the last
 * message with NLM_F_ACK, as meshnft frames it) in one sendto, then reads
 * one answer per acknowledged message. Exits 0 when every answer is an ack
 * (nlmsgerr.error == 0), 1 with a message on stderr otherwise (the kernel
 * answers a refused message with an error whatever its flags).
 *
 * On stdout, one line: "send_us=N close_us=N", the microseconds spent in
 * sendto (where nfnetlink validates and commits the batch, in this
 * process's context) and in the close() of the socket (where the last
 * release of a NETLINK_NETFILTER socket waits for the destroy work of a
 * transaction that freed objects).
 *
 * Built by the benchmark with `cc -O2 -static`; no libraries besides libc.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BUF_SIZE (8 << 20) /* as meshnft's socket (src/nft/sock.rs) */

static int fail(const char *what)
{
	fprintf(stderr, "floor: %s: %s\n", what, strerror(errno));
	return 1;
}

static long long now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: floor NETNS BATCH\n");
		return 2;
	}

	/* The batch, whole. */
	int bf = open(argv[2], O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (bf < 0 || fstat(bf, &st) != 0)
		return fail(argv[2]);
	size_t len = (size_t)st.st_size;
	char *batch = malloc(len ? len : 1);
	if (!batch)
		return fail("malloc");
	for (size_t got = 0; got < len;) {
		ssize_t n = read(bf, batch + got, len - got);
		if (n <= 0)
			return fail(argv[2]);
		got += (size_t)n;
	}
	close(bf);

	/* Answers expected: one per message that asks for an ack. */
	unsigned expected = 0;
	for (size_t off = 0; off + sizeof(struct nlmsghdr) <= len;) {
		const struct nlmsghdr *h = (const void *)(batch + off);
		if (h->nlmsg_len < sizeof(*h) || off + h->nlmsg_len > len) {
			fprintf(stderr, "floor: %s: bad netlink framing at %zu\n", argv[2], off);
			return 1;
		}
		if (h->nlmsg_flags & NLM_F_ACK)
			expected++;
		off += NLMSG_ALIGN(h->nlmsg_len);
	}

	int ns = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (ns < 0)
		return fail(argv[1]);
	if (setns(ns, CLONE_NEWNET) != 0)
		return fail("setns");
	close(ns);

	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
	if (fd < 0)
		return fail("socket(NETLINK_NETFILTER)");
	int size = BUF_SIZE;
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof(size)) != 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size)) != 0)
		return fail("setsockopt");
	struct timeval tmo = {.tv_sec = 10};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tmo, sizeof(tmo));

	struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
	long long t0 = now_us();
	ssize_t sent = sendto(fd, batch, len, 0, (struct sockaddr *)&kernel, sizeof(kernel));
	long long t1 = now_us();
	if (sent < 0)
		return fail("sendto");
	if ((size_t)sent != len) {
		fprintf(stderr, "floor: short sendto: %zd of %zu bytes\n", sent, len);
		return 1;
	}

	static char buf[1 << 16];
	unsigned acked = 0;
	while (acked < expected) {
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		if (n < 0)
			return fail("recv");
		for (const struct nlmsghdr *h = (const void *)buf; NLMSG_OK(h, (size_t)n);
		     h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_type != NLMSG_ERROR)
				continue;
			const struct nlmsgerr *e = NLMSG_DATA(h);
			if (e->error != 0) {
				fprintf(stderr, "floor: the kernel refused message seq %u: %s\n",
					h->nlmsg_seq, strerror(-e->error));
				return 1;
			}
			acked++;
		}
	}

	long long t2 = now_us();
	close(fd);
	long long t3 = now_us();
	printf("send_us=%lld close_us=%lld\n", t1 - t0, t3 - t2);
	return 0;
}
