"""The episode: runtime process, the two interfaces, planners, budgets, trace writer."""
