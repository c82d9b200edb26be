"""What the tests share: real servers, peers, proxies, databases and checks."""
