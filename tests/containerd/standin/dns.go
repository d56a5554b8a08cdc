package main

// The DNS modes: `standin dns` (a server that answers one name and logs every query) and
// `standin lookup` (one query). Only what the tests need of RFC 1035: one question, class IN,
// an A answer; names compared without regard to case.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// dnsServe serves on every address of `listen` (PORT: the wildcard of both families).
func dnsServe(listen string, tcp bool, answer, tag string) {
	name, ip, ok := strings.Cut(answer, "=")
	addr := net.ParseIP(ip).To4()
	if !ok || addr == nil {
		fatal(fmt.Errorf("bad -answer %q: NAME=IPV4", answer))
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	var addrs []string
	for _, a := range strings.Split(listen, ",") {
		a = strings.TrimSpace(a)
		if !strings.Contains(a, ":") {
			a = ":" + a
		}
		addrs = append(addrs, a)
	}
	for _, a := range addrs {
		pc, err := net.ListenPacket("udp", a)
		if err != nil {
			fatal(err)
		}
		go dnsUDP(pc, name, addr, tag)
		if tcp {
			l, err := net.Listen("tcp", a)
			if err != nil {
				fatal(err)
			}
			go dnsTCP(l, name, addr, tag)
		}
	}
	fmt.Printf("dns tag=%s listening %s tcp=%v answer %s=%s\n", tag, strings.Join(addrs, ","), tcp, name, addr)
	select {}
}

func dnsUDP(pc net.PacketConn, name string, addr net.IP, tag string) {
	buf := make([]byte, 4096)
	for {
		n, peer, err := pc.ReadFrom(buf)
		if err != nil {
			fatal(err)
		}
		if reply, q, ok := dnsReply(buf[:n], name, addr); ok {
			fmt.Printf("dns tag=%s query=%s type=%d over=udp peer=%s orig=-\n", tag, q.name, q.qtype, peer)
			_, _ = pc.WriteTo(reply, peer)
		}
	}
}

func dnsTCP(l net.Listener, name string, addr net.IP, tag string) {
	for {
		c, err := l.Accept()
		if err != nil {
			fatal(err)
		}
		go func(c *net.TCPConn) {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			orig := originalDst(c)
			for {
				msg, err := readTCPMessage(c)
				if err != nil {
					return
				}
				reply, q, ok := dnsReply(msg, name, addr)
				if !ok {
					return
				}
				fmt.Printf("dns tag=%s query=%s type=%d over=tcp peer=%s orig=%s\n", tag, q.name, q.qtype, c.RemoteAddr(), orig)
				if writeTCPMessage(c, reply) != nil {
					return
				}
			}
		}(c.(*net.TCPConn))
	}
}

func readTCPMessage(r io.Reader) ([]byte, error) {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(n[:]))
	_, err := io.ReadFull(r, msg)
	return msg, err
}

func writeTCPMessage(w io.Writer, msg []byte) error {
	out := make([]byte, 2, 2+len(msg))
	binary.BigEndian.PutUint16(out, uint16(len(msg)))
	_, err := w.Write(append(out, msg...))
	return err
}

// question is a message's first question.
type question struct {
	name  string
	qtype uint16
	end   int // the offset just after it
}

// parseQuestion reads the question of `msg` (a query with QDCOUNT 1, no compression in it).
func parseQuestion(msg []byte) (question, error) {
	if len(msg) < 12 || binary.BigEndian.Uint16(msg[4:6]) != 1 {
		return question{}, errors.New("not a query with one question")
	}
	var labels []string
	i := 12
	for {
		if i >= len(msg) {
			return question{}, errors.New("truncated name")
		}
		l := int(msg[i])
		i++
		if l == 0 {
			break
		}
		if l > 63 || i+l > len(msg) {
			return question{}, errors.New("bad label")
		}
		labels = append(labels, string(msg[i:i+l]))
		i += l
	}
	if i+4 > len(msg) {
		return question{}, errors.New("truncated question")
	}
	return question{
		name:  strings.ToLower(strings.Join(labels, ".")),
		qtype: binary.BigEndian.Uint16(msg[i : i+2]),
		end:   i + 4,
	}, nil
}

// dnsReply answers query `msg`: `addr` for `name` type A, no address for its other types,
// NXDOMAIN for any other name. ok false: not a query it reads (ignored).
func dnsReply(msg []byte, name string, addr net.IP) ([]byte, question, bool) {
	q, err := parseQuestion(msg)
	if err != nil || msg[2]&0x80 != 0 {
		return nil, q, false
	}
	out := append([]byte{}, msg[:q.end]...)
	out[2] = 0x84 | msg[2]&0x79 // QR, AA; the opcode and RD as asked
	out[3] = 0x80               // RA, NOERROR
	binary.BigEndian.PutUint16(out[6:8], 0)
	binary.BigEndian.PutUint16(out[8:10], 0)
	binary.BigEndian.PutUint16(out[10:12], 0)
	switch {
	case q.name != name:
		out[3] |= 3 // NXDOMAIN
	case q.qtype == 1:
		binary.BigEndian.PutUint16(out[6:8], 1)
		out = append(out, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4)
		out = append(out, addr...)
	}
	return out, q, true
}

// lookup sends one type-A query for `name` to `server` and prints the first address.
func lookup(server string, tcp bool, name string) error {
	msg := []byte{0x4d, 0x6e, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, l := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		if l == "" || len(l) > 63 {
			return fmt.Errorf("bad name %q", name)
		}
		msg = append(msg, byte(len(l)))
		msg = append(msg, l...)
	}
	msg = append(msg, 0, 0, 1, 0, 1)
	network := "udp"
	if tcp {
		network = "tcp"
	}
	c, err := net.DialTimeout(network, server, 3*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	var reply []byte
	if tcp {
		if err := writeTCPMessage(c, msg); err != nil {
			return err
		}
		if reply, err = readTCPMessage(c); err != nil {
			return err
		}
	} else {
		if _, err := c.Write(msg); err != nil {
			return err
		}
		buf := make([]byte, 4096)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		reply = buf[:n]
	}
	q, err := parseQuestion(reply)
	if err != nil {
		return err
	}
	if rcode := reply[3] & 0xf; rcode != 0 {
		return fmt.Errorf("rcode %d", rcode)
	}
	if binary.BigEndian.Uint16(reply[6:8]) == 0 || len(reply) < q.end+16 {
		return errors.New("no answer")
	}
	rr := reply[q.end:]
	fmt.Printf("answer %s %s\n", name, net.IP(rr[12:16]))
	return nil
}
