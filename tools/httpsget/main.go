// Command httpsget GETs an HTTPS URL and prints the status line and the body. It trusts the CA in
// -ca (by default the pod's service-account CA) and, inside a pod, presents the pod's
// service-account token, so a test can see a pod reach the API server through a Service and be
// authenticated there. It exits 1 when the request fails, not on an HTTP error status.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	caFile := flag.String("ca", serviceAccountDir+"/ca.crt", "PEM file of the CA to trust")
	tokenFile := flag.String("token", serviceAccountDir+"/token", "bearer token file, sent when it exists")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: httpsget [-ca FILE] [-token FILE] URL")
		os.Exit(2)
	}
	if err := get(flag.Arg(0), *caFile, *tokenFile); err != nil {
		fmt.Fprintln(os.Stderr, "httpsget:", err)
		os.Exit(1)
	}
}

func get(url, caFile, tokenFile string) error {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("no certificate in %s", caFile)
	}
	request, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token, err := os.ReadFile(tokenFile); err == nil {
		request.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots}}}
	response, err := client.Do(request)
	if err != nil {
		return err
	}
	defer response.Body.Close()
	body, err := io.ReadAll(response.Body)
	if err != nil {
		return err
	}
	fmt.Printf("%s %s\n%s\n", response.Proto, response.Status, body)
	return nil
}
