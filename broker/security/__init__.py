"""Who is asking, and may they (SPEC S12): principals, SCRAM credentials, the ACL authorizer."""
