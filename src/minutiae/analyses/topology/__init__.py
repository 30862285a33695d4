"""How a node is wired (parse/), where each GPU sits (placement), its binding plan (plan,
render), its checks (check, profile, learn) and its noisy neighbours (neighbours, irqs)."""

__all__: list[str] = []
