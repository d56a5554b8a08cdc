module meshnft.test/linkerd-await

go 1.26
