// A static HTTPS client for the local node's test image (busybox-static's wget cannot do TLS).
module gputenant.io/tools/httpsget

go 1.25.0
