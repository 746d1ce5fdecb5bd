"""Real-robot bridge (installed as robotrl.real_robot)."""
