"""Tables of cases the e2e tests send to the real API server: the cases and their builders, no
fixtures, so each test module keeps only the plane it guards and the assertions."""
