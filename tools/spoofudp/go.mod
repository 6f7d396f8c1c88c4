// A static test program for the local node's test image: sends one UDP datagram with a forged
// source address, as a tenant pod would to walk through NetworkPolicies that judge the source.
module gputenant.io/tools/spoofudp

go 1.25.0
