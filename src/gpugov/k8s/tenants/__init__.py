"""Tenant fences: what a Tenant declares around its namespaces and the controller keeping them.

`guardrails` reads `spec.guardrails` with the defaults of the Tenant's trust tier, `fences`
turns it into the objects each namespace gets, `checks` refuses bad Tenants, `controller`
creates, repairs and reports them, `vcluster` maps pods a vCluster syncer created back to
their virtual names, `audit` is the apiserver audit policy for tenants' GPU pods and
Queue/Tenant changes. docs/tenancy.md describes all of it.
"""
