# Thin aliases for ./dev, which installs what each step needs (see README).
.PHONY: install demo test test-unit lint format bench
install demo test test-unit lint format bench:
	./dev $@
