"""AgentService: a tenant's agents as versioned resources. `definitions.py` checks a definition as the
agents folder's loader does and names what it refers to that does not exist; `servicer.py` serves the
RPCs over the sessions service's AgentStoreService, behind the API key's "agents:write" permission."""
