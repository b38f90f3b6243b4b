"""Reports over what agents did: token, tool and cost totals from session logs and the bus."""
