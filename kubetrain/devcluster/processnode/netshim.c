/*
 * The process node's port isolation: every pod has an address of its own (127.1.x.y), but its
 * processes share the host's ports, so two pods that listen on one port (every PyTorchJob's
 * MASTER_PORT 23456, torchrun's 29500) would collide. Loaded into each container's processes
 * (LD_PRELOAD), this makes a pod's sockets behave as in a network namespace of its own:
 *
 * - bind() to the wildcard address (0.0.0.0, or :: on a dual-stack socket) binds the pod's own
 *   address instead, so each pod has the whole port range on its address; the port is recorded in
 *   the pod's directory (KUBETRAIN_POD_PORTS);
 * - connect() to loopback (127.0.0.1, ::1) on a port the pod itself listens on reaches the pod's
 *   address, as localhost reaches the pod's own listeners in Kubernetes; every other connection to
 *   loopback (the API server) is left alone.
 *
 * Written in C because no Python-level patch reaches sockets opened by native code (torch's
 * TCPStore, NCCL, gloo). Nothing else is changed; without KUBETRAIN_POD_IP it does nothing.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef int (*socket_call)(int, const struct sockaddr *, socklen_t);

static struct in_addr pod_address;
static int active;
static const char *ports_dir;

__attribute__((constructor)) static void setup(void) {
    const char *ip = getenv("KUBETRAIN_POD_IP");
    ports_dir = getenv("KUBETRAIN_POD_PORTS");
    active = ip != NULL && ports_dir != NULL && inet_pton(AF_INET, ip, &pod_address) == 1;
}

static socket_call real(const char *name) {
    return (socket_call)dlsym(RTLD_NEXT, name);
}

static void port_path(char *path, size_t size, unsigned port) {
    snprintf(path, size, "%s/%u", ports_dir, port);
}

static void record_port(int fd) {
    struct sockaddr_storage bound;
    socklen_t length = sizeof(bound);
    if (getsockname(fd, (struct sockaddr *)&bound, &length) != 0) return;
    unsigned port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                                : ntohs(((struct sockaddr_in *)&bound)->sin_port);
    char path[PATH_MAX];
    port_path(path, sizeof(path), port);
    int marker = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    if (marker >= 0) close(marker);
}

static int pod_listens_on(unsigned port) {
    char path[PATH_MAX];
    port_path(path, sizeof(path), port);
    return access(path, F_OK) == 0;
}

static void mapped_pod_address(struct in6_addr *out) {
    memset(out, 0, sizeof(*out));
    out->s6_addr[10] = 0xff;
    out->s6_addr[11] = 0xff;
    memcpy(&out->s6_addr[12], &pod_address, sizeof(pod_address));
}

int bind(int fd, const struct sockaddr *address, socklen_t length) {
    socket_call bind_ = real("bind");
    if (!active || address == NULL) return bind_(fd, address, length);
    if (address->sa_family == AF_INET && length >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in own = *(const struct sockaddr_in *)address;
        if (own.sin_addr.s_addr != htonl(INADDR_ANY)) return bind_(fd, address, length);
        own.sin_addr = pod_address;
        int done = bind_(fd, (struct sockaddr *)&own, sizeof(own));
        if (done == 0) record_port(fd);
        return done;
    }
    if (address->sa_family == AF_INET6 && length >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 own = *(const struct sockaddr_in6 *)address;
        int v6only = 0;
        socklen_t size = sizeof(v6only);
        if (memcmp(&own.sin6_addr, &in6addr_any, sizeof(in6addr_any)) != 0 ||
            getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &size) != 0 || v6only)
            return bind_(fd, address, length);
        mapped_pod_address(&own.sin6_addr);
        int done = bind_(fd, (struct sockaddr *)&own, sizeof(own));
        if (done == 0) record_port(fd);
        return done;
    }
    return bind_(fd, address, length);
}

int connect(int fd, const struct sockaddr *address, socklen_t length) {
    socket_call connect_ = real("connect");
    if (!active || address == NULL) return connect_(fd, address, length);
    if (address->sa_family == AF_INET && length >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in target = *(const struct sockaddr_in *)address;
        if (target.sin_addr.s_addr == htonl(INADDR_LOOPBACK) && pod_listens_on(ntohs(target.sin_port))) {
            target.sin_addr = pod_address;
            return connect_(fd, (struct sockaddr *)&target, sizeof(target));
        }
    } else if (address->sa_family == AF_INET6 && length >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 target = *(const struct sockaddr_in6 *)address;
        struct in6_addr mapped_loopback = {{{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1}}};
        int loopback = memcmp(&target.sin6_addr, &in6addr_loopback, sizeof(in6addr_loopback)) == 0 ||
                       memcmp(&target.sin6_addr, &mapped_loopback, sizeof(mapped_loopback)) == 0;
        if (loopback && pod_listens_on(ntohs(target.sin6_port))) {
            mapped_pod_address(&target.sin6_addr);
            return connect_(fd, (struct sockaddr *)&target, sizeof(target));
        }
    }
    return connect_(fd, address, length);
}
