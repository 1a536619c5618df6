-- The retirement gate (SPEC §7.3) looks for the unended instances pinned to a draining version,
-- every `sutra.deployments.retire-interval`: by version, not by a scan of every instance.
CREATE INDEX instances_by_version ON instances (tenant, deployment, version);
