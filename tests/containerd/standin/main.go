// Command standin is the one program of the local test images
// (scripts/containerd.sh) besides busybox: a static binary with five modes.
//
//	standin pause
//	    The pod sandbox's process: waits for SIGTERM or SIGINT, exits 0.
//	standin proxy -listen 4140,4143,4190,4191 -dial 198.19.0.1:80 [-ready FILE] [-ipv4-only]
//	    A service-mesh proxy stand-in: listens on every port (IPv4 and IPv6
//	    wildcard; with -ipv4-only the IPv4 wildcard only, as Linkerd's proxy
//	    with its default disableIPv6: true), then makes one outbound HTTP request (the first packet that
//	    ends meshnft's init phase), creates FILE if given (a postStart hook
//	    waits for it, as Linkerd's proxy-await holds the app until the proxy
//	    is ready), then serves. Every accepted connection is
//	    answered with a short HTTP/1.0 response naming the port and the
//	    connection's original destination (SO_ORIGINAL_DST, before the
//	    redirect), and logged on stdout as one line:
//	      accepted port=4140 peer=198.18.0.5:40000 orig=198.19.0.1:80 request="GET / HTTP/1.1"
//	    (orig=- when the connection was not redirected).
//	standin http -listen 198.19.0.1:80
//	    A plain web server (the same answer, without the original destination).
//	standin dns -listen 15053 [-tcp] -answer NAME=IPV4 [-tag TAG]
//	    A DNS server (a resolver, or a mesh proxy's DNS listener): UDP (and
//	    with -tcp TCP, length-prefixed) on the port (wildcard, both families)
//	    or ADDR:PORT, each comma-separated. A query for NAME, type A, gets
//	    IPV4 (TTL 5), type AAAA no address; any other name NXDOMAIN. Every
//	    query is logged on stdout as one line:
//	      dns tag=resolver query=NAME type=1 over=udp peer=198.18.0.5:40000 orig=-
//	    (orig: over TCP the original destination, SO_ORIGINAL_DST; else -).
//	standin lookup -server ADDR:PORT [-tcp] NAME
//	    One query for NAME, type A (3 s), over UDP or TCP; prints
//	    `answer NAME IPV4` and exits 0, or the error and exits 1.
//
// Stdlib only, built with CGO_ENABLED=0 GO111MODULE=off.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

const soOriginalDst = 80 // SO_ORIGINAL_DST and IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv4.h, netfilter_ipv6/ip6_tables.h)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: standin pause | proxy -listen PORTS [-dial ADDR] [-ready FILE] [-ipv4-only] | http -listen ADDR | dns -listen PORTS [-tcp] -answer NAME=IP [-tag TAG] | lookup -server ADDR [-tcp] NAME")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "pause":
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
		<-ch
	case "proxy":
		fs := flag.NewFlagSet("proxy", flag.ExitOnError)
		listen := fs.String("listen", "4140,4143", "comma-separated ports")
		dial := fs.String("dial", "", "HOST:PORT to send one GET to at start")
		ready := fs.String("ready", "", "file created once the GET to -dial was sent (a postStart hook waits for it)")
		ipv4Only := fs.Bool("ipv4-only", false, "listen on IPv4 only (Linkerd's proxy with disableIPv6: true)")
		_ = fs.Parse(os.Args[2:])
		proxy(*listen, *dial, *ready, *ipv4Only)
	case "http":
		fs := flag.NewFlagSet("http", flag.ExitOnError)
		listen := fs.String("listen", "", "ADDR:PORT")
		_ = fs.Parse(os.Args[2:])
		l, err := net.Listen("tcp", *listen)
		if err != nil {
			fatal(err)
		}
		fmt.Printf("listening %s\n", *listen)
		serve(l, false)
	case "dns":
		fs := flag.NewFlagSet("dns", flag.ExitOnError)
		listen := fs.String("listen", "", "comma-separated PORT or ADDR:PORT")
		tcp := fs.Bool("tcp", false, "TCP too")
		answer := fs.String("answer", "", "NAME=IPV4")
		tag := fs.String("tag", "dns", "the tag of each log line")
		_ = fs.Parse(os.Args[2:])
		dnsServe(*listen, *tcp, *answer, *tag)
	case "lookup":
		fs := flag.NewFlagSet("lookup", flag.ExitOnError)
		server := fs.String("server", "", "ADDR:PORT")
		tcp := fs.Bool("tcp", false, "over TCP")
		_ = fs.Parse(os.Args[2:])
		if err := lookup(*server, *tcp, fs.Arg(0)); err != nil {
			fmt.Printf("lookup %s at %s: error=%q\n", fs.Arg(0), *server, err.Error())
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "standin: unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "standin: %v\n", err)
	os.Exit(1)
}

func proxy(ports, dial, ready string, ipv4Only bool) {
	networks := []string{"tcp4", "tcp6"}
	if ipv4Only {
		networks = networks[:1]
	}
	var ls []net.Listener
	for _, p := range strings.Split(ports, ",") {
		port, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			fatal(fmt.Errorf("bad port %q", p))
		}
		for _, network := range networks {
			l, err := net.Listen(network, net.JoinHostPort("", strconv.Itoa(port)))
			if err != nil {
				if network == "tcp6" {
					continue // no IPv6 in this pod
				}
				fatal(err)
			}
			ls = append(ls, l)
		}
	}
	fmt.Printf("listening ports=%s networks=%s\n", ports, strings.Join(networks, ","))
	if dial != "" {
		line, err := get(dial)
		if err != nil {
			fmt.Printf("dialled %s error=%q\n", dial, err.Error())
		} else {
			fmt.Printf("dialled %s status=%q\n", dial, line)
		}
	}
	if ready != "" {
		// The proxy's first packet is out: the pod's init phase is over.
		if err := os.WriteFile(ready, nil, 0o644); err != nil {
			fmt.Printf("ready %s error=%q\n", ready, err.Error())
		}
	}
	for _, l := range ls[1:] {
		go serve(l, true)
	}
	serve(ls[0], true)
}

// get sends one HTTP/1.0 GET to addr and returns the status line.
func get(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", addr); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

func serve(l net.Listener, withOrig bool) {
	port := l.Addr().(*net.TCPAddr).Port
	for {
		c, err := l.Accept()
		if err != nil {
			fatal(err)
		}
		go handle(c.(*net.TCPConn), port, withOrig)
	}
}

func handle(c *net.TCPConn, port int, withOrig bool) {
	defer c.Close()
	orig := "-"
	if withOrig {
		orig = originalDst(c)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	request, _ := r.ReadString('\n')
	request = strings.TrimRight(request, "\r\n")
	for { // the rest of the head, up to the blank line
		l, err := r.ReadString('\n')
		if err != nil || strings.TrimSpace(l) == "" {
			break
		}
	}
	fmt.Printf("accepted port=%d peer=%s orig=%s request=%q\n", port, c.RemoteAddr(), orig, request)
	body := fmt.Sprintf("port %d, original destination %s\n", port, orig)
	fmt.Fprintf(c, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}

// originalDst returns the connection's destination before NAT, or "-".
func originalDst(c *net.TCPConn) string {
	raw, err := c.SyscallConn()
	if err != nil {
		return "-"
	}
	out := "-"
	v6 := c.LocalAddr().(*net.TCPAddr).IP.To4() == nil
	_ = raw.Control(func(fd uintptr) {
		if v6 {
			var sa syscall.RawSockaddrInet6
			n := uint32(unsafe.Sizeof(sa))
			if getsockopt(fd, syscall.SOL_IPV6, unsafe.Pointer(&sa), &n) {
				p := int(sa.Port>>8 | sa.Port<<8)
				out = net.JoinHostPort(net.IP(sa.Addr[:]).String(), strconv.Itoa(p))
			}
		} else {
			var sa syscall.RawSockaddrInet4
			n := uint32(unsafe.Sizeof(sa))
			if getsockopt(fd, syscall.SOL_IP, unsafe.Pointer(&sa), &n) {
				p := int(sa.Port>>8 | sa.Port<<8)
				out = net.JoinHostPort(net.IP(sa.Addr[:]).String(), strconv.Itoa(p))
			}
		}
	})
	return out
}

func getsockopt(fd uintptr, level int, p unsafe.Pointer, n *uint32) bool {
	_, _, e := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, uintptr(level), soOriginalDst,
		uintptr(p), uintptr(unsafe.Pointer(n)), 0)
	return e == 0
}
