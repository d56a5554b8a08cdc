// A second mutating admission webhook for the real node (tests/node/linkerd.rs): it puts one
// init container in front of a pod's others, where Vault's agent injector puts
// `vault-agent-init` when it runs after the mesh's injector. It serves HTTPS on -addr with a
// certificate it makes at start (written to -ca as the caBundle of its
// MutatingWebhookConfiguration: base64 of the PEM), and patches every pod it is sent.
// Standard library only.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"flag"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"time"
)

type review struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Request    *request  `json:"request,omitempty"`
	Response   *response `json:"response,omitempty"`
}

type request struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Object    struct {
		Metadata struct {
			Name         string `json:"name"`
			GenerateName string `json:"generateName"`
		} `json:"metadata"`
		Spec struct {
			InitContainers []json.RawMessage `json:"initContainers"`
		} `json:"spec"`
	} `json:"object"`
}

type response struct {
	UID       string `json:"uid"`
	Allowed   bool   `json:"allowed"`
	PatchType string `json:"patchType,omitempty"`
	Patch     []byte `json:"patch,omitempty"`
}

func certificate(caOut string) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		log.Fatal(err)
	}
	tmpl := x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "meshnft-test-webhook"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, &key.PublicKey, key)
	if err != nil {
		log.Fatal(err)
	}
	pemCert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	bundle := base64.StdEncoding.EncodeToString(pemCert)
	if err := os.WriteFile(caOut+".tmp", []byte(bundle), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.Rename(caOut+".tmp", caOut); err != nil {
		log.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:9443", "listen address")
	caOut := flag.String("ca", "", "where to write the certificate (PEM)")
	container := flag.String("container", "", "the init container to put first (JSON)")
	flag.Parse()
	var c map[string]any
	if err := json.Unmarshal([]byte(*container), &c); err != nil {
		log.Fatalf("-container: %v", err)
	}
	cert := certificate(*caOut)
	http.HandleFunc("/mutate", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		var in review
		if err := json.Unmarshal(body, &in); err != nil || in.Request == nil {
			http.Error(w, "not an AdmissionReview", 400)
			return
		}
		var patch []map[string]any
		if len(in.Request.Object.Spec.InitContainers) == 0 {
			patch = append(patch, map[string]any{"op": "add", "path": "/spec/initContainers", "value": []any{c}})
		} else {
			patch = append(patch, map[string]any{"op": "add", "path": "/spec/initContainers/0", "value": c})
		}
		p, _ := json.Marshal(patch)
		name := in.Request.Object.Metadata.Name
		if name == "" {
			name = in.Request.Object.Metadata.GenerateName
		}
		log.Printf("%s/%s: %d init containers before, %s first", in.Request.Namespace, name,
			len(in.Request.Object.Spec.InitContainers), c["name"])
		out := review{APIVersion: in.APIVersion, Kind: in.Kind,
			Response: &response{UID: in.Request.UID, Allowed: true, PatchType: "JSONPatch", Patch: p}}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	srv := &http.Server{Addr: *addr, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	log.Printf("listening on %s", *addr)
	log.Fatal(srv.ListenAndServeTLS("", ""))
}
