"""Several host clusters: a hub places tenants on member clusters, Argo CD delivers them, members
report their capacity (docs/fleet.md). Pure: `report`, `placement`, `decision`; IO: `members`,
`reporter`, `hub`."""
