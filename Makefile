# Thin aliases for ./dev, which installs what each step needs (see README).
.PHONY: install demo test lint bench
install demo test lint bench:
	./dev $@
